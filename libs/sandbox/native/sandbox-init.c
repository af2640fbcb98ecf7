// anvil-sandbox-init: the first process of an Anvil sandbox (libs/sandbox).
//
// Usage: anvil-sandbox-init [OPTIONS] -- [SETUP...] COMMAND [ARG...]
//   --info-fd N          progress lines for the host on fd N (see "Protocol")
//   --listen PORT        listen on 127.0.0.1:PORT and relay every connection to --connect
//   --connect PATH       the Unix socket of the host-side session relay
//   --setup N            the first N words after -- are a setup command, run to its end first
//   --rlimit NAME=VALUE  cpu|data|nproc|fsize|core|nofile, set in the setup and command
//                        processes just before they exec (the supervisor itself stays unlimited,
//                        so a command that exhausts its process limit cannot stop the relay)
//   --subreaper          no PID namespace around us (the `none` backend): adopt orphans and kill
//                        every descendant at the end, since nothing else would
//   --parent-pid N       (with --subreaper) the host's pid: if it is already gone when we start,
//                        we exit at once (its death signal would never reach us)
//
// Two modes. As PID 1 of a PID namespace (the `local` backend runs bwrap --as-pid-1), stopping
// everything is kill(-1) and our own exit makes the kernel kill whatever is left. Without one
// (--subreaper) we walk /proc for our descendants, which orphans cannot leave: they are
// re-parented to us.
//
// Protocol (one line each, written with a single write(2), so lines never interleave):
//   listening | setup-start | setup-end exit N | setup-end signal N | command-start
//   command-end exit N cpu SECONDS | command-end signal N cpu SECONDS | error PHASE MESSAGE
// The host trusts these for phases only; the exit status also comes back as our own.
//
// Signals: SIGTERM/SIGINT/SIGHUP are forwarded (SIGTERM) to everything we started; SIGUSR1
// kills all of it at once and exits (the host's grace ran out, or the host died: the none mode
// sets it as our parent-death signal).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIMITS 8

static int info_fd = -1;
static int subreaper = 0;
static sigset_t handled;

struct limit {
  int resource;
  rlim_t value;
};
static struct limit limits[MAX_LIMITS];
static int n_limits = 0;

static void info(const char *fmt, ...) {
  if (info_fd < 0) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof line - 2) n = sizeof line - 2;
  line[n++] = '\n';
  ssize_t w;
  do w = write(info_fd, line, (size_t)n);
  while (w < 0 && errno == EINTR);
}

static void die(const char *phase, const char *what) {
  info("error %s %s: %s", phase, what, strerror(errno));
  fprintf(stderr, "anvil-sandbox-init: %s: %s: %s\n", phase, what, strerror(errno));
  _exit(126);
}

static int parse_limit(const char *arg) {
  static const struct {
    const char *name;
    int resource;
  } names[] = {{"cpu", RLIMIT_CPU},     {"data", RLIMIT_DATA}, {"nproc", RLIMIT_NPROC},
               {"fsize", RLIMIT_FSIZE}, {"core", RLIMIT_CORE}, {"nofile", RLIMIT_NOFILE}};
  const char *eq = strchr(arg, '=');
  if (!eq || n_limits == MAX_LIMITS) return -1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strlen(names[i].name) == (size_t)(eq - arg) && strncmp(arg, names[i].name, (size_t)(eq - arg)) == 0) {
      char *end;
      errno = 0;
      unsigned long long v = strtoull(eq + 1, &end, 10);
      if (errno || *end || end == eq + 1) return -1;
      limits[n_limits].resource = names[i].resource;
      limits[n_limits].value = (rlim_t)v;
      n_limits++;
      return 0;
    }
  }
  return -1;
}

// In a forked child, just before exec: default signals, the limits, every fd above 2 closed on exec.
static void child_prepare(void) {
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  for (int s = 1; s < NSIG; s++) sigaction(s, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  for (int i = 0; i < n_limits; i++) {
    struct rlimit rl = {limits[i].value, limits[i].value};
    // CPU: SIGXCPU at the limit, SIGKILL a second later for a program that ignores it.
    if (limits[i].resource == RLIMIT_CPU) rl.rlim_max = limits[i].value + 1;
    if (setrlimit(limits[i].resource, &rl) != 0) die("rlimit", "setrlimit");
  }
  syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
}

static pid_t start(const char *phase, char **argv) {
  pid_t pid = fork();
  if (pid < 0) die(phase, "fork");
  if (pid == 0) {
    child_prepare();
    execvp(argv[0], argv);
    info("error %s %s: %s", phase, argv[0], strerror(errno));
    fprintf(stderr, "anvil-sandbox-init: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  return pid;
}

static void write_all(int fd, const char *buf, ssize_t n) {
  while (n > 0) {
    ssize_t w = write(fd, buf, (size_t)n);
    if (w < 0) {
      if (errno == EINTR) continue;
      _exit(0);
    }
    buf += w;
    n -= w;
  }
}

// One relayed connection, in its own process: bytes both ways, each half closed on its EOF.
static void relay_connection(int client, const char *path) {
  int up = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
  if (up < 0 || connect(up, (struct sockaddr *)&addr, sizeof addr) != 0) _exit(0);
  int one = 1;
  setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int src[2] = {client, up}, dst[2] = {up, client};
  static char buf[65536];
  struct pollfd p[2];
  int open_dirs = 2;
  while (open_dirs > 0) {
    for (int d = 0; d < 2; d++) p[d] = (struct pollfd){.fd = src[d], .events = POLLIN};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(0);
    }
    for (int d = 0; d < 2; d++) {
      if (src[d] < 0 || !(p[d].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(src[d], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        shutdown(dst[d], SHUT_WR);
        src[d] = -1;
        open_dirs--;
        continue;
      }
      write_all(dst[d], buf, n);
    }
  }
  _exit(0);
}

static int listen_loopback(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) die("listen", "socket");
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s, (struct sockaddr *)&a, sizeof a) != 0) die("listen", "bind 127.0.0.1");
  if (listen(s, 128) != 0) die("listen", "listen");
  return s;
}

// Our live descendants (not ourselves), from /proc: the none mode's view of "everything we started".
static int descendants(pid_t *out, int max) {
  enum { CAP = 65536 };
  static pid_t pids[CAP], ppids[CAP];
  int n = 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < CAP) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300], stat[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t len = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (len <= 0) continue;
    stat[len] = 0;
    char *rp = strrchr(stat, ')');
    if (!rp || rp[1] == 0) continue;
    char state;
    int ppid;
    if (sscanf(rp + 2, "%c %d", &state, &ppid) != 2 || state == 'Z' || state == 'X') continue;
    pids[n] = atoi(e->d_name);
    ppids[n] = ppid;
    n++;
  }
  closedir(d);
  // Transitive closure from our pid; the list is small, so repeated passes are fine.
  int found = 0;
  pid_t self = getpid();
  char *in = calloc((size_t)n, 1);
  if (!in) return 0;
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = 0; i < n; i++) {
      if (in[i]) continue;
      int parent_in = ppids[i] == self;
      for (int j = 0; !parent_in && j < n; j++) parent_in = in[j] && pids[j] == ppids[i];
      if (parent_in) {
        in[i] = 1;
        changed = 1;
        if (found < max) out[found++] = pids[i];
      }
    }
  }
  free(in);
  return found;
}

static void reap_all(void) {
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

static void signal_all(int sig) {
  if (!subreaper) {
    kill(-1, sig); // PID 1 of our namespace: everything in it but us
    return;
  }
  static pid_t list[65536];
  int n = descendants(list, 65536);
  for (int i = 0; i < n; i++) kill(list[i], sig);
}

// The none mode's end: SIGKILL everything we started until nothing is left (a process may fork
// between a scan and its kill; its child then is ours to find on the next pass).
static void kill_all_and_wait(void) {
  if (!subreaper) return;
  struct timespec pause = {0, 5 * 1000 * 1000};
  for (int pass = 0; pass < 1000; pass++) {
    static pid_t list[65536];
    reap_all();
    int n = descendants(list, 65536);
    if (n == 0) return;
    for (int i = 0; i < n; i++) kill(list[i], SIGKILL);
    nanosleep(&pause, NULL);
  }
}

static double cpu_seconds(const struct rusage *ru) {
  return (double)ru->ru_utime.tv_sec + ru->ru_utime.tv_usec / 1e6 + (double)ru->ru_stime.tv_sec + ru->ru_stime.tv_usec / 1e6;
}

static void noop(int sig) { (void)sig; }

int main(int argc, char **argv) {
  int port = 0, setup_words = 0, parent_pid = 0;
  const char *connect_path = NULL;
  int i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    }
    if (strcmp(argv[i], "--subreaper") == 0) {
      subreaper = 1;
      continue;
    }
    if (i + 1 >= argc) goto usage;
    const char *v = argv[++i];
    if (strcmp(argv[i - 1], "--info-fd") == 0) info_fd = atoi(v);
    else if (strcmp(argv[i - 1], "--listen") == 0) port = atoi(v);
    else if (strcmp(argv[i - 1], "--connect") == 0) connect_path = v;
    else if (strcmp(argv[i - 1], "--setup") == 0) setup_words = atoi(v);
    else if (strcmp(argv[i - 1], "--parent-pid") == 0) parent_pid = atoi(v);
    else if (strcmp(argv[i - 1], "--rlimit") == 0) {
      if (parse_limit(v) != 0) goto usage;
    } else goto usage;
  }
  if (i >= argc || setup_words < 0 || setup_words >= argc - i || (port && !connect_path) || port < 0 || port > 65535) goto usage;
  if (info_fd >= 0 && fcntl(info_fd, F_SETFD, FD_CLOEXEC) != 0) info_fd = -1;

  // Nothing we start may ptrace us or reopen our fds through /proc/<pid>/fd.
  prctl(PR_SET_DUMPABLE, 0);
  if (subreaper) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    prctl(PR_SET_PDEATHSIG, SIGUSR1);
    // The host died before we asked to hear about it.
    if (parent_pid > 0 && getppid() != parent_pid) return 137;
  }

  // A PID 1 only receives signals it has a handler for, so each gets one, then waits in a signalfd.
  int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1};
  sigemptyset(&handled);
  struct sigaction sa = {.sa_handler = noop};
  for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++) {
    sigaddset(&handled, sigs[k]);
    sigaction(sigs[k], &sa, NULL);
  }
  signal(SIGPIPE, SIG_IGN);
  sigprocmask(SIG_BLOCK, &handled, NULL);
  int sfd = signalfd(-1, &handled, SFD_CLOEXEC);
  if (sfd < 0) die("init", "signalfd");

  int lfd = -1;
  if (port) {
    lfd = listen_loopback(port);
    info("listening");
  }

  char **setup = NULL;
  char **command = argv + i + setup_words;
  if (setup_words) {
    setup = calloc((size_t)setup_words + 1, sizeof(char *));
    if (!setup) die("init", "calloc");
    memcpy(setup, argv + i, (size_t)setup_words * sizeof(char *));
    info("setup-start");
  }
  pid_t current = setup ? start("setup", setup) : start("command", command);
  int in_setup = setup != NULL;
  if (!in_setup) info("command-start");

  for (;;) {
    struct pollfd p[2] = {{.fd = sfd, .events = POLLIN}, {.fd = lfd, .events = POLLIN}};
    if (poll(p, lfd >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      die("init", "poll");
    }
    if (lfd >= 0 && (p[1].revents & POLLIN)) {
      int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      if (c >= 0) {
        pid_t r = fork();
        if (r == 0) {
          struct sigaction dfl = {.sa_handler = SIG_DFL};
          for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++) sigaction(sigs[k], &dfl, NULL);
          sigprocmask(SIG_UNBLOCK, &handled, NULL);
          close(lfd);
          close(sfd);
          if (info_fd >= 0) close(info_fd);
          relay_connection(c, connect_path);
        }
        close(c);
      }
    }
    if (!(p[0].revents & POLLIN)) continue;
    struct signalfd_siginfo si;
    if (read(sfd, &si, sizeof si) != sizeof si) continue;
    if (si.ssi_signo == SIGUSR1) {
      signal_all(SIGKILL);
      kill_all_and_wait();
      return 137;
    }
    if (si.ssi_signo != SIGCHLD) {
      signal_all(SIGTERM);
      continue;
    }
    // Reap everything that ended (orphans included); act on the one we are waiting for.
    for (;;) {
      int status;
      struct rusage ru;
      pid_t w = wait4(-1, &status, WNOHANG, &ru);
      if (w <= 0) break;
      if (w != current) continue;
      const char *what = WIFSIGNALED(status) ? "signal" : "exit";
      int code = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
      if (in_setup) {
        info("setup-end %s %d", what, code);
        if (WIFSIGNALED(status) || code != 0) {
          signal_all(SIGKILL);
          kill_all_and_wait();
          return 125;
        }
        in_setup = 0;
        current = start("command", command);
        info("command-start");
        continue;
      }
      info("command-end %s %d cpu %.3f", what, code, cpu_seconds(&ru));
      // Whatever the command left behind goes with it.
      signal_all(SIGKILL);
      kill_all_and_wait();
      return WIFSIGNALED(status) ? 128 + code : code;
    }
  }

usage:
  fprintf(stderr,
          "usage: anvil-sandbox-init [--info-fd N] [--listen PORT --connect PATH] [--setup N] [--rlimit NAME=VALUE]... "
          "[--subreaper [--parent-pid N]] -- [SETUP...] COMMAND [ARG...]\n");
  return 2;
}
