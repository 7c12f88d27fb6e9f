package server

import "google.golang.org/grpc/mem"

// BufferPool is the pool of message buffers a process that serves or calls
// the API should give gRPC (experimental.SetDefaultBufferPool, from its
// main: the proto codec takes only the process's default pool). gRPC's
// default has tiers of 256 B, 4, 16 and 32 KiB and 1 MiB, and zeroes a
// buffer's whole capacity each time it hands one out. A run's output comes
// in chunks of up to 32 KiB, a few bytes over once framed, so every such
// event took a 1 MiB buffer and cleared all of it, on the daemon's side and
// the client's: 7.9% of the host's CPU while 16 MiB of stdout streamed.
// Tiers of 64 and 256 KiB clear 64 KiB instead.
func BufferPool() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(8, 12, 14, 15, 16, 18, 20)
	if err != nil {
		panic(err) // the tiers are constants: a mistake in them, not an input
	}
	return p
}
