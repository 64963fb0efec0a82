//go:build !unix

package shard

const osMapped = false

func allocCacheMem(n int) []byte { return make([]byte, n) }

func freeCacheMem([]byte) {}
