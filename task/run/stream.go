package run

// Stream names an output stream.
type Stream int

// The output streams of a program.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

// Observer receives a run's events as they happen, one call at a time. An
// error from it means the caller is gone: the run is cancelled.
type Observer interface {
	// Started is called once, when the container runs.
	Started(Started) error
	// Output is called with each chunk of output up to the stream's cap.
	// p is valid only during the call.
	Output(s Stream, p []byte) error
}
