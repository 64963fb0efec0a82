package timers

// Timer is one registered timer: the encoded grouping key it belongs to and
// its expiry, in milliseconds (processing time or event time, by the
// application's time mode).
type Timer struct {
	Key    []byte
	Expiry int64
}
