package run

// State says whether a run is still going.
type State int

// The states of a run.
const (
	Running State = iota + 1
	Finished
)

// Info is what the daemon knows of a run.
type Info struct {
	ID string
	// Tenant is whose run it is.
	Tenant  string
	State   State
	Labels  map[string]string
	Started *Started
	Result  *Result
	// Error says why sandboxd failed the run, when it did: then there is
	// no Result.
	Error string
	// Network is an allow-listed run's network log so far, while it runs;
	// once it has ended, Result.Network has it.
	Network []NetworkEvent
}
