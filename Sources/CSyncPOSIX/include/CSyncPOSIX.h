// Linux system calls that Swift's Glibc module does not expose (they need _GNU_SOURCE).
// Used by SyncPOSIX only; on other platforms the functions are absent and SyncPOSIX
// falls back to the portable calls.
#ifndef CSYNCPOSIX_H
#define CSYNCPOSIX_H

#if defined(__linux__)
/// accept4(2) without the peer address: the new descriptor gets `flags`
/// (SOCK_CLOEXEC, SOCK_NONBLOCK) atomically.
int csyncposix_accept4(int listener, int flags);
/// pipe2(2): both ends get `flags` (O_CLOEXEC, O_NONBLOCK) atomically.
int csyncposix_pipe2(int ends[2], int flags);
/// SO_PEERCRED: the credentials of a Unix socket's peer (struct ucred needs _GNU_SOURCE).
/// Returns 0, or -1 with errno set.
int csyncposix_peer_credentials(int fd, unsigned int *uid, unsigned int *gid, int *pid);
/// SO_PEERGROUPS (Linux 4.13+): the supplementary groups the peer had when it connected.
/// Returns how many were stored (at most `capacity`), or -1 with errno set (ERANGE: more
/// than `capacity`; ENOPROTOOPT: an older kernel).
int csyncposix_peer_groups(int fd, unsigned int *groups, int capacity);
/// A pseudo-terminal pair (posix_openpt, grantpt, unlockpt, then the slave opened), both
/// ends close-on-exec and without becoming a controlling terminal. Returns 0, or -1 with
/// errno set. For tests of the interactive line editor.
int csyncposix_open_pseudo_terminal(int *master, int *slave);
/// pthread_setname_np(pthread_self(), name): the calling thread's name for the system (at
/// most 15 bytes). Returns 0, or an error number.
int csyncposix_set_thread_name(const char *name);
/// prctl(PR_SET_DUMPABLE, dumpable): whether the process may leave a core dump (and be
/// attached to by ptrace from processes of its user). Returns 0, or -1 with errno set.
int csyncposix_set_dumpable(int dumpable);
/// prctl(PR_GET_DUMPABLE): 1 when the process may leave a core dump, 0 when not, -1 on error.
int csyncposix_get_dumpable(void);
#endif

#endif
