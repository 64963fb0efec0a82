package shard

// CrashForTest drops s as a killed process would: the committed batches
// kept in memory by write-behind are lost, then the store is closed (a
// store closed or not is the same to a reopen: its writes were made).
func CrashForTest(s *Shard) error {
	if s.flight != nil {
		// A background write of the layer, made or failed, is the
		// store's: the kill came after it (a store kept open across the
		// "crash" must not take it later).
		<-s.flight.done
		s.flight = nil
	}
	s.wb = nil
	return s.Close()
}

// FlightForTest reports whether a background write of the layer is out.
func FlightForTest(s *Shard) bool { return s.flight != nil }

// LandForTest waits for the layer's background write, if any, and lands it
// (outside a batch), returning its error.
func LandForTest(s *Shard) error {
	s.resetReads()
	return s.land(true)
}

// StoredOffsetForTest is the changelog offset in the store (a restore
// after a crash starts there).
func StoredOffsetForTest(s *Shard) int64 { return s.stored }

// UnflushedForTest returns the keys and charged bytes of the write-behind
// layer.
func UnflushedForTest(s *Shard) (keys int, bytes int64) {
	if s.wb == nil {
		return 0, 0
	}
	return len(s.wb.index), s.wb.used
}
