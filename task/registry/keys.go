package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sandboxd/sandboxd/task/run"
)

// keyTTL is how long a run asked for with an idempotency key answers its
// retries.
const keyTTL = 24 * time.Hour

// Keys remembers, for a day, the runs asked for with an idempotency key,
// so that a retry gets the run it retries instead of a second one. Each
// key is a small JSON file of the state folder, written before the run is
// admitted, again when it has an id and when it ends; a retry after a
// restart finds it there, and a run the daemon did not see end is LOST,
// never run again. Files are renamed into place, not synced: a kill -9
// loses nothing of them; a power cut may.
type Keys struct {
	dir string

	mu    sync.Mutex
	live  map[string]*Claim // this process's claims whose runs have not ended
	swept time.Time
}

// Claim is a key being run by this process.
type Claim struct {
	keyRecord
	file string
	// ready is closed once the run has an id, or the claim is given up.
	ready chan struct{}
}

// keyRecord is what a key's file holds.
type keyRecord struct {
	Tenant  string    `json:"tenant"`
	Key     string    `json:"key"`
	Request string    `json:"request_sha256"`
	At      time.Time `json:"at"`
	RunID   string    `json:"run_id,omitempty"`
	// Run is the run once it ended (or LOST).
	Run *run.Info `json:"run,omitempty"`
}

// NewKeys keeps the keys in dir.
func NewKeys(dir string) *Keys { return &Keys{dir: dir, live: map[string]*Claim{}} }

// CheckKey refuses a key that is not 1 to 128 printable ASCII characters.
func CheckKey(k string) error {
	if k == "" || len(k) > 128 || strings.IndexFunc(k, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		return run.Invalid("options.idempotency_key", "is not 1 to 128 printable ASCII characters without spaces")
	}
	return nil
}

// fileOf names the file of tenant's key.
func (k *Keys) fileOf(tenant, key string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + key))
	return filepath.Join(k.dir, hex.EncodeToString(sum[:])+".json")
}

// Recover reads the keys an earlier instance left: those past their day
// go, and those whose runs it did not see end are LOST. It returns the
// ended runs, for GetRun and AttachRun to report, and of them the lost;
// node names this daemon in a cluster, for the ids it makes.
func (k *Keys) Recover(now time.Time, node string) (runs, lost []run.Info, err error) {
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		return nil, nil, err
	}
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		p := filepath.Join(k.dir, e.Name())
		rec, err := readKey(p)
		if err != nil || !strings.HasSuffix(p, ".json") || now.Sub(rec.At) > keyTTL {
			os.Remove(p) // a temporary file of a write cut short, or expired
			continue
		}
		if rec.Run == nil {
			rec.Run = lostRun(rec, node)
			if err := writeKey(p, rec); err != nil {
				return nil, nil, err
			}
			lost = append(lost, *rec.Run)
		}
		runs = append(runs, *rec.Run)
	}
	k.swept = now
	return runs, lost, nil
}

// lostRun is the run of a key that its daemon did not see end.
func lostRun(rec keyRecord, node string) *run.Info {
	id := rec.RunID
	if id == "" {
		id, _ = run.NewID(node)
	}
	return &run.Info{ID: id, Tenant: rec.Tenant, State: run.Finished, Result: &run.Result{RunID: id, Tenant: rec.Tenant, Status: run.StatusLost,
		Message: "sandboxd stopped before this run ended (it was queued or running); it was not run again"}}
}

func readKey(p string) (keyRecord, error) {
	var rec keyRecord
	b, err := os.ReadFile(p)
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	return rec, err
}

func writeKey(p string, rec keyRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Take claims tenant's key for a request with digest request. When the
// key is another run's, it returns that run's id: the request must be the
// same, and a run still being admitted is waited for.
func (k *Keys) Take(ctx context.Context, tenant, key, request string) (c *Claim, runID string, err error) {
	file := k.fileOf(tenant, key)
	for {
		k.mu.Lock()
		k.sweep(time.Now())
		if c := k.live[file]; c != nil {
			other := c.RunID
			k.mu.Unlock()
			if c.Request != request {
				return nil, "", keyUsed(key, other)
			}
			select {
			case <-c.ready:
			case <-ctx.Done():
				return nil, "", context.Cause(ctx)
			}
			if c.RunID != "" {
				return nil, c.RunID, nil
			}
			continue // given up before it ran: claim it afresh
		}
		rec, err := readKey(file)
		switch {
		case err == nil && time.Since(rec.At) <= keyTTL:
			k.mu.Unlock()
			if rec.Request != request {
				return nil, "", keyUsed(key, rec.RunID)
			}
			return nil, rec.RunID, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			k.mu.Unlock()
			return nil, "", fmt.Errorf("idempotency key %q: %w", key, err)
		}
		c := &Claim{keyRecord: keyRecord{Tenant: tenant, Key: key, Request: request, At: time.Now().UTC()}, file: file, ready: make(chan struct{})}
		if err := writeKey(file, c.keyRecord); err != nil {
			k.mu.Unlock()
			return nil, "", fmt.Errorf("idempotency key %q: %w", key, err)
		}
		k.live[file] = c
		k.mu.Unlock()
		return c, "", nil
	}
}

func keyUsed(key, runID string) error {
	return errdefs.ErrAlreadyExists.WithMessage(fmt.Sprintf("options.idempotency_key: %q was used for a different request (run %s)", key, runID))
}

// Bind records the id of c's run once it has one.
func (k *Keys) Bind(c *Claim, runID string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	c.RunID = runID
	err := writeKey(c.file, c.keyRecord)
	close(c.ready)
	return err
}

// End records how c's run ended; a run that never had an id gives its key
// up, for a retry to run.
func (k *Keys) End(c *Claim, rn run.Info, ran bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.live, c.file)
	if !ran {
		close(c.ready)
		return os.Remove(c.file)
	}
	rn.Result = cloneResultForKey(rn.Result)
	c.Run = &rn
	return writeKey(c.file, c.keyRecord)
}

// cloneResultForKey is a result as a key keeps it: without the list of
// files, which the bundle keeps.
func cloneResultForKey(res *run.Result) *run.Result {
	if res == nil {
		return nil
	}
	r := *res
	r.Files = nil
	return &r
}

// sweep removes the keys past their day, once a minute at most. Callers
// hold k.mu.
func (k *Keys) sweep(now time.Time) {
	if now.Sub(k.swept) < time.Minute {
		return
	}
	k.swept = now
	entries, _ := os.ReadDir(k.dir)
	for _, e := range entries {
		p := filepath.Join(k.dir, e.Name())
		if _, live := k.live[p]; live {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > keyTTL {
			os.Remove(p)
		}
	}
}

// Lookup reads what tenant's key holds: the run, once it ended.
func (k *Keys) Lookup(tenant, key string) (*run.Info, error) {
	rec, err := readKey(k.fileOf(tenant, key))
	if err != nil {
		return nil, err
	}
	return rec.Run, nil
}
