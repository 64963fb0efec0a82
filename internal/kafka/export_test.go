package kafka

// SetReaderFetchBytes sets the PartitionReader fetch size for a measurement
// and returns a func that puts the previous one back.
func SetReaderFetchBytes(n int32) (undo func()) {
	old := readerFetchBytes
	readerFetchBytes = n
	return func() { readerFetchBytes = old }
}
