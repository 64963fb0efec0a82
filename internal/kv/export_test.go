package kv

// MaxMemtableFilters is maxMemtableFilters, for package kv_test.
const MaxMemtableFilters = maxMemtableFilters
