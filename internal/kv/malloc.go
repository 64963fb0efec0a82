//go:build cgo && !kstate_nocgo

package kv

// #include <stdlib.h>
// #if defined(__GLIBC__)
// #include <malloc.h>
// #include <pthread.h>
// #include <stdio.h>
// #include <string.h>
// #endif
// // kstate_limit_malloc_arenas runs when the program is loaded, before the
// // Go runtime starts a thread (a Go thread that calls into C gets an arena
// // of its own, and arenas that exist stay): see mallocArenas.
// __attribute__((constructor)) static void kstate_limit_malloc_arenas(void) {
// #if defined(__GLIBC__) && defined(M_ARENA_MAX)
// 	if (getenv("MALLOC_ARENA_MAX") == NULL) mallopt(M_ARENA_MAX, 2); // mallocArenas
// #endif
// }
// #if defined(__GLIBC__)
// static pthread_barrier_t kstate_arena_barrier;
// static void* kstate_arena_worker(void* arg) {
// 	void* p = malloc(4096);
// 	memset(p, 1, 4096);
// 	pthread_barrier_wait(&kstate_arena_barrier);
// 	free(p);
// 	return NULL;
// }
// #endif
// // kstate_malloc_heaps starts threads that each malloc while all of them
// // are alive, then returns how many heaps (arenas) glibc's malloc_info
// // lists; -1 without glibc or on error.
// static int kstate_malloc_heaps(int threads) {
// #if defined(__GLIBC__)
// 	pthread_t t[64];
// 	if (threads > 64) threads = 64;
// 	if (pthread_barrier_init(&kstate_arena_barrier, NULL, threads) != 0) return -1;
// 	for (int i = 0; i < threads; i++)
// 		if (pthread_create(&t[i], NULL, kstate_arena_worker, NULL) != 0) return -1;
// 	for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
// 	pthread_barrier_destroy(&kstate_arena_barrier);
// 	char* buf = NULL;
// 	size_t len = 0;
// 	FILE* f = open_memstream(&buf, &len);
// 	if (f == NULL) return -1;
// 	malloc_info(0, f);
// 	fclose(f);
// 	int n = 0;
// 	for (char* p = buf; (p = strstr(p, "<heap nr=")) != NULL; p++) n++;
// 	free(buf);
// 	return n;
// #else
// 	(void)threads;
// 	return -1;
// #endif
// }
import "C"

// mallocArenas is how many malloc arenas a kstate process keeps (glibc's
// M_ARENA_MAX, whose default is 8 per core), set by the C constructor above
// when the binary is loaded, unless MALLOC_ARENA_MAX is in the environment
// (glibc then applies the operator's value), and only under glibc.
//
// RocksDB allocates its blocks, memtables and iterators with malloc from
// many threads: the pipelines' cgo calls and RocksDB's own flush and
// compaction threads. glibc gives a thread that meets contention an arena
// of its own and returns little of a fragmented arena to the system: with
// two arenas the peak RSS of a RocksDB state of 1 GB fell 17 % (764 to 633
// MiB, docs/BENCHMARKS.md, "Malloc arenas"). Two arenas keep the
// allocator's contention low at the core counts kstate runs one pipeline
// per core on; it is what Hadoop, Heroku and many JVM services running
// RocksDB set.
const mallocArenas = 2

// mallocHeaps starts threads (at most 64) that malloc at the same time and
// returns how many malloc arenas the process then has: -1 without glibc.
// For the test of the limit.
func mallocHeaps(threads int) int { return int(C.kstate_malloc_heaps(C.int(threads))) }
