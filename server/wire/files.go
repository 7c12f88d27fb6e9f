package wire

// FileChunk is the size of the messages that carry files and bundles.
const FileChunk = 256 << 10
