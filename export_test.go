package kstate

// SetRetriableForTest replaces the classification of retriable Kafka
// errors (sessionErr) until restore is called: a test breaks it on purpose
// to show that a fault case then fails.
func SetRetriableForTest(f func(error) bool) (restore func()) {
	old := isRetriable
	isRetriable = f
	return func() { isRetriable = old }
}
