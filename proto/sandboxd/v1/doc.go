// Package sandboxdv1 is the generated Go code of the sandboxd.v1 API
// (sandboxd.proto). Run `make proto` to regenerate it; never edit it.
package sandboxdv1
