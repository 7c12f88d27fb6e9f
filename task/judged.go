package task

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/sys/atomicwriter"

	"github.com/sandboxd/sandboxd/task/judge"
	"github.com/sandboxd/sandboxd/task/registry"
)

// judgedTTL is how long a judgement asked for with an idempotency key
// answers a retry, as a run's key does.
const judgedTTL = 24 * time.Hour

// judged keeps the judgements of idempotency keys: in memory while one is
// judged, so that a retry waits for it, and then on disk, so that a retry
// after the call broke off, or after a restart, gets the same judgement.
type judged struct {
	dir  string
	mu   sync.Mutex
	live map[string]*judging
}

// judging is a keyed judgement under way; done is closed when j and err
// are set.
type judging struct {
	submission string
	done       chan struct{}
	j          judge.Judgement
	err        error
}

// judgedRecord is a keyed judgement on disk.
type judgedRecord struct {
	Submission string          `json:"submission"`
	Judgement  judge.Judgement `json:"judgement"`
}

func newJudged(dir string) *judged { return &judged{dir: dir, live: map[string]*judging{}} }

// once judges sub by do once for tenant's idempotency key: a retry of the
// same submission gets the first judgement, marked Retried; another
// submission with the key is refused. The judging outlives a caller that
// leaves, so that its retry finds it; a judging that was refused (bad
// input, a busy daemon) keeps nothing, and a retry judges afresh.
func (k *judged) once(ctx context.Context, tenant string, sub judge.Submission, do func(context.Context) (judge.Judgement, error)) (judge.Judgement, error) {
	if err := registry.CheckKey(sub.IdempotencyKey); err != nil {
		return judge.Judgement{}, err
	}
	digest, err := submissionDigest(sub)
	if err != nil {
		return judge.Judgement{}, err
	}
	name := sha256.Sum256([]byte(tenant + "\x00" + sub.IdempotencyKey))
	file := filepath.Join(k.dir, hex.EncodeToString(name[:])+".json")
	k.mu.Lock()
	l, ok := k.live[file]
	if !ok {
		if rec, err := k.read(file); err == nil {
			k.mu.Unlock()
			if rec.Submission != digest {
				return judge.Judgement{}, keyTaken(sub.IdempotencyKey)
			}
			rec.Judgement.Retried = true
			return rec.Judgement, nil
		}
		l = &judging{submission: digest, done: make(chan struct{})}
		k.live[file] = l
		go func() {
			l.j, l.err = do(context.WithoutCancel(ctx))
			if l.err == nil {
				if err := k.write(file, judgedRecord{Submission: digest, Judgement: l.j}); err != nil {
					l.err = fmt.Errorf("keep the judgement of idempotency key %q: %w", sub.IdempotencyKey, err)
				}
			}
			k.mu.Lock()
			delete(k.live, file)
			k.mu.Unlock()
			close(l.done)
		}()
	} else if l.submission != digest {
		k.mu.Unlock()
		return judge.Judgement{}, keyTaken(sub.IdempotencyKey)
	}
	k.mu.Unlock()
	select {
	case <-l.done:
		j := l.j
		j.Retried = ok
		return j, l.err
	case <-ctx.Done():
		return judge.Judgement{}, context.Cause(ctx)
	}
}

func keyTaken(key string) error {
	return errdefs.ErrAlreadyExists.WithMessage(fmt.Sprintf("idempotency_key: %q was given with another submission; use a new key for a new submission", key))
}

// submissionDigest is what a key's retry must repeat: the submission but
// its id, which the caller may renumber in a retried batch.
func submissionDigest(sub judge.Submission) (string, error) {
	sub.ID = ""
	b, err := json.Marshal(sub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func (k *judged) read(file string) (judgedRecord, error) {
	var rec judgedRecord
	fi, err := os.Stat(file)
	if err != nil {
		return rec, err
	}
	if time.Since(fi.ModTime()) > judgedTTL {
		os.Remove(file)
		return rec, fs.ErrNotExist
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(b, &rec)
}

// write keeps rec durably: written aside, synced, renamed.
func (k *judged) write(file string, rec judgedRecord) error {
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return atomicwriter.WriteFile(file, b, 0o600)
}

// sweep removes the judgements past their time.
func (k *judged) sweep(now time.Time) {
	// A folder that cannot be read has nothing to sweep yet.
	entries, _ := os.ReadDir(k.dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > judgedTTL {
			os.Remove(filepath.Join(k.dir, e.Name()))
		}
	}
}
