package wire

// Error details that clients can act on.
const (
	// ErrorDomain is the domain of sandboxd's ErrorInfo details.
	ErrorDomain = "sandboxd.dev"
	// ReasonImageNotPresent: the requested image is not in the backend.
	ReasonImageNotPresent = "IMAGE_NOT_PRESENT"
	// ReasonElsewhere: another daemon of the cluster holds the run or
	// session; metadata "address" says where to call, "daemon" its name.
	ReasonElsewhere = "ELSEWHERE"
)

// FollowedHeader marks a call that a client makes to the daemon another
// one sent it to: that daemon serves it rather than sending it on, so that
// two daemons whose views of the cluster differ for a moment do not send a
// call back and forth.
const FollowedHeader = "sandboxd-followed"
