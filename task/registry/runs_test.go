package registry

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sandboxd/sandboxd/artifacts"
	"github.com/sandboxd/sandboxd/task/run"
)

func TestRegistryKeepsRecentResultsWithoutFiles(t *testing.T) {
	r := New(3)
	for i := range 5 {
		id := fmt.Sprint(i)
		r.Add(id, "", nil, func(error) {})
		res := &run.Result{RunID: id, Status: run.StatusOK, Files: []artifacts.Output{{Path: "out.txt", Type: "file", Size: 1}}}
		r.Finish(id, *res, nil)
		if len(res.Files) != 1 {
			t.Fatalf("finish changed the caller's result: %+v", res)
		}
	}
	for i := range 5 {
		rn, ok := r.Get(fmt.Sprint(i))
		if ok != (i >= 2) {
			t.Fatalf("run %d remembered = %v, want the 3 latest only", i, ok)
		}
		if !ok {
			continue
		}
		if rn.State != run.Finished || rn.Result.Status != run.StatusOK {
			t.Errorf("run %d = %+v", i, rn)
		}
		if rn.Result.Files != nil {
			t.Errorf("run %d kept its %d files", i, len(rn.Result.Files))
		}
	}
}

// TestFinishAFailedRun is the regression test of a handler's panic: a run
// that sandboxd failed was finished with a nil result, which finish
// dereferenced.
func TestFinishAFailedRun(t *testing.T) {
	r := New(3)
	r.Add("x", "", nil, func(error) {})
	r.Finish("x", run.Result{}, errors.New("the backend is gone"))
	rn, ok := r.Get("x")
	if !ok || rn.State != run.Finished || rn.Result != nil || rn.Error != "the backend is gone" {
		t.Fatalf("run = %+v, want finished with the error and no result", rn)
	}
}
