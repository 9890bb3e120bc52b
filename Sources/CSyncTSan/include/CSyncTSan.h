// ThreadSanitizer's annotations for a lock it cannot see into, for SyncLocks' Locked.
//
// Synchronization.Mutex hands a contended lock over through futex(2) inside an uninstrumented
// library, so TSan sees no happens-before edge from one critical section to the next and
// reports races that the lock excludes. Locked tells TSan the truth: it acquires the lock's
// address after taking the lock and releases it before giving it up.
//
// The functions are static inline and compile to nothing unless STORESYNC_TSAN is defined
// (Scripts/sanitizers builds with -Xcc -DSTORESYNC_TSAN; Swift's ClangImporter does not tell
// this header that the Swift code is built with -sanitize=thread) or the C code that includes
// it is itself built with -fsanitize=thread. So they cost nothing in other builds.
#ifndef CSYNCTSAN_H
#define CSYNCTSAN_H

#if defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define CSYNCTSAN_ENABLED 1
#  endif
#endif
#if !defined(CSYNCTSAN_ENABLED) && (defined(__SANITIZE_THREAD__) || defined(STORESYNC_TSAN))
#  define CSYNCTSAN_ENABLED 1
#endif

#if defined(CSYNCTSAN_ENABLED)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#endif

/// Whether this build tells ThreadSanitizer about locks (1 under -fsanitize=thread, else 0).
static inline int csynctsan_enabled(void) {
#if defined(CSYNCTSAN_ENABLED)
    return 1;
#else
    return 0;
#endif
}

/// After taking a lock at `address`: everything its last holder did happens before what follows.
static inline void csynctsan_acquire(void *address) {
#if defined(CSYNCTSAN_ENABLED)
    __tsan_acquire(address);
#else
    (void)address;
#endif
}

/// Before giving up a lock at `address`: everything done so far happens before its next holder.
static inline void csynctsan_release(void *address) {
#if defined(CSYNCTSAN_ENABLED)
    __tsan_release(address);
#else
    (void)address;
#endif
}

#endif
