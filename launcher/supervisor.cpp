// The mixgrad-run supervisor loop (see supervisor.h).
// Decision: one thread and one poll(2) loop over every rank's stdout and stderr pipes plus a
// self-pipe that the signal handler writes the signal number into, so SIGCHLD, SIGINT and
// SIGTERM are handled in the loop, never inside the handler. Lines are written whole, so
// ranks' lines never interleave mid-line.
#include "launcher/supervisor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <optional>
#include <vector>

extern char** environ;

namespace mg::launcher {
namespace {

using Clock = std::chrono::steady_clock;

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  std::size_t n = s.size();
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return;  // a closed stdout must not stop the supervision
    }
    p += k;
    n -= std::size_t(k);
  }
}

struct Stream {
  int fd = -1;
  int console = 1;  // where its lines go: 1 (stdout) or 2 (stderr)
  std::string partial;
};

struct Rank {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  Stream streams[2];
  std::deque<std::string> tail;
  int log_fd = -1;
  bool exited = false;
  int status = 0;  // exit code, or 128+signal
  std::string how;  // "exited with status 3", "was killed by signal 9 (Killed)"
};

int free_port(const std::string& addr) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int port = -1;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
    socklen_t len = sizeof(sa);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) port = ntohs(sa.sin_port);
  }
  if (fd >= 0) ::close(fd);
  MG_CHECK(port > 0, launcher::LaunchError, "mixgrad-run: could not find a free port on ", addr,
           "\n  hint: pass --master-port explicitly");
  return port;
}

// The child's side of fork(): its own process group, pipes on stdout/stderr, the environment,
// default signal dispositions, then exec. Never returns.
[[noreturn]] void exec_rank(const LaunchOptions& o, const std::map<std::string, std::string>& env,
                            int out_fd, int err_fd) {
  // The launcher's handlers would write into its signal pipe (an exec that fails keeps them):
  // restore the defaults while signals are still blocked (run() blocks them around fork).
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) std::signal(sig, SIG_DFL);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  ::setpgid(0, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  std::signal(SIGPIPE, SIG_DFL);  // ignored in the launcher; exec would keep it ignored
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  std::map<std::string, std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) vars[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args{o.program};
  args.insert(args.end(), o.args.begin(), o.args.end());
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  ::execvpe(o.program.c_str(), argv.data(), envp.data());
  std::string msg = "mixgrad-run: cannot execute '" + o.program + "': " + std::strerror(errno) + "\n";
  write_all(2, msg);
  ::_exit(127);
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& o) : o_(o) {}

  int run() {
    int port = o_.master_port == 0 ? free_port(o_.master_addr) : o_.master_port;
    install_signal_handlers();
    if (!o_.log_dir.empty()) {
      ::mkdir(o_.log_dir.c_str(), 0777);
      struct stat st {};
      MG_CHECK(::stat(o_.log_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), launcher::LaunchError,
               "mixgrad-run: cannot create the log folder '", o_.log_dir, "': ", std::strerror(errno));
    }
    const int world = o_.nnodes * o_.nproc_per_node;
    try {
      start_ranks(port, world);
    } catch (...) {
      // A later rank could not start (its log file, a pipe, fork): the ranks already running
      // would wait at the rendezvous for the whole timeout, holding MASTER_PORT. Stop them first.
      stop_started_ranks();
      throw;
    }
    loop();
    return finish();
  }

 private:
  void start_ranks(int port, int world) {
    for (int l = 0; l < o_.nproc_per_node; ++l) {
      Rank r;
      r.local_rank = l;
      r.rank = o_.node_rank * o_.nproc_per_node + l;
      std::map<std::string, std::string> env{
          {"MASTER_ADDR", o_.master_addr},          {"MASTER_PORT", std::to_string(port)},
          {"RANK", std::to_string(r.rank)},         {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(l)},        {"LOCAL_WORLD_SIZE", std::to_string(o_.nproc_per_node)},
          {"NODE_RANK", std::to_string(o_.node_rank)}, {"MIXGRAD_RUN", "1"}};
      int out[2], err[2];
      MG_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, launcher::LaunchError,
               "mixgrad-run: pipe failed: ", std::strerror(errno));
      if (!o_.log_dir.empty()) {
        std::string path = o_.log_dir + "/rank_" + std::to_string(r.rank) + ".log";
        r.log_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        MG_CHECK(r.log_fd >= 0, launcher::LaunchError, "mixgrad-run: cannot write ", path, ": ", std::strerror(errno));
      }
      sigset_t block, old;
      sigemptyset(&block);
      for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&block, sig);
      ::sigprocmask(SIG_BLOCK, &block, &old);
      pid_t pid = ::fork();
      if (pid == 0) exec_rank(o_, env, out[1], err[1]);
      ::sigprocmask(SIG_SETMASK, &old, nullptr);
      MG_CHECK(pid >= 0, launcher::LaunchError, "mixgrad-run: fork failed: ", std::strerror(errno));
      ::setpgid(pid, pid);  // also here, so a signal sent right after fork reaches the group
      ::close(out[1]);
      ::close(err[1]);
      r.pid = pid;
      r.streams[0] = {out[0], 1, {}};
      r.streams[1] = {err[0], 2, {}};
      for (auto& s : r.streams) ::fcntl(s.fd, F_SETFL, O_NONBLOCK);
      ranks_.push_back(std::move(r));
    }
  }

  // SIGTERM to the started ranks, SIGKILL after the grace period, then every one reaped.
  void stop_started_ranks() {
    signal_all(SIGTERM);
    const auto kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(o_.grace_seconds));
    auto reap_some = [&](int flags) {
      for (auto& r : ranks_) {
        int st = 0;
        if (!r.exited && ::waitpid(r.pid, &st, flags) == r.pid) r.exited = true;
      }
    };
    while (live() > 0 && Clock::now() < kill_at) {
      reap_some(WNOHANG);
      if (live() > 0) ::usleep(20 * 1000);
    }
    signal_all(SIGKILL);
    reap_some(0);
  }

  void install_signal_handlers() {
    MG_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, launcher::LaunchError,
             "mixgrad-run: pipe failed: ", std::strerror(errno));
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    ::sigaction(SIGCHLD, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
  }

  int live() const {
    int n = 0;
    for (const auto& r : ranks_) n += !r.exited;
    return n;
  }

  void signal_all(int sig) {
    for (const auto& r : ranks_) {
      if (!r.exited) ::kill(-r.pid, sig);
    }
  }

  // A failing rank: the others get `sig`, and SIGKILL once the grace period is over.
  void start_stopping(int sig) {
    stopping_ = true;
    arm_kill();
    signal_all(sig);
  }

  // A signal the launcher received (Ctrl-C, SIGTERM): forwarded, and the ranks take the time they
  // need to answer it (the examples finish the step and save a checkpoint). A second one is
  // forwarded too, and ranks still running a grace period after it are killed.
  void forward_signal(int sig) {
    stopping_ = true;
    if (++signals_received_ >= 2) arm_kill();
    signal_all(sig);
  }

  void arm_kill() {
    if (kill_armed_) return;
    kill_armed_ = true;
    kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.grace_seconds));
  }

  void reap() {
    for (;;) {
      int st = 0;
      pid_t pid = ::waitpid(-1, &st, WNOHANG);
      if (pid <= 0) return;
      for (auto& r : ranks_) {
        if (r.pid != pid) continue;
        r.exited = true;
        if (WIFEXITED(st)) {
          r.status = WEXITSTATUS(st);
          r.how = "exited with status " + std::to_string(r.status);
        } else {
          const int sig = WTERMSIG(st);
          r.status = 128 + sig;
          r.how = "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
        }
        if (r.status != 0 && failed_ < 0 && received_ == 0 && !stopping_) {
          failed_ = int(&r - ranks_.data());
          start_stopping(SIGTERM);
        }
      }
    }
  }

  void emit(Rank& r, Stream& s, const std::string& line) {
    const std::string prefix = "[rank " + std::to_string(r.rank) + "] ";
    write_all(s.console, (o_.prefix_output ? prefix : "") + line + "\n");
    if (r.log_fd >= 0) write_all(r.log_fd, line + "\n");
    if (o_.tail_lines > 0) {
      r.tail.push_back(line);
      while (int(r.tail.size()) > o_.tail_lines) r.tail.pop_front();
    }
  }

  // Reads what is available; false at end of file.
  bool pump(Rank& r, Stream& s) {
    char buf[65536];
    for (;;) {
      ssize_t k = ::read(s.fd, buf, sizeof(buf));
      if (k > 0) {
        s.partial.append(buf, std::size_t(k));
        std::size_t start = 0, nl;
        while ((nl = s.partial.find('\n', start)) != std::string::npos) {
          emit(r, s, s.partial.substr(start, nl - start));
          start = nl + 1;
        }
        s.partial.erase(0, start);
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && errno == EAGAIN) return true;
      if (!s.partial.empty()) emit(r, s, s.partial);
      s.partial.clear();
      ::close(s.fd);
      s.fd = -1;
      return false;
    }
  }

  void loop() {
    bool killed = false;
    std::optional<Clock::time_point> drain_until;
    for (;;) {
      std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
      std::vector<std::pair<Rank*, Stream*>> owners{{nullptr, nullptr}};
      for (auto& r : ranks_) {
        for (auto& s : r.streams) {
          if (s.fd >= 0) {
            fds.push_back({s.fd, POLLIN, 0});
            owners.push_back({&r, &s});
          }
        }
      }
      if (live() == 0) {
        // Every rank exited: drain the pipes briefly (a grandchild may hold them open).
        if (!drain_until) drain_until = Clock::now() + std::chrono::seconds(2);
        if (fds.size() == 1 || Clock::now() >= *drain_until) return;
      }
      int timeout_ms = -1;
      auto until = [&](Clock::time_point t) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
        int v = int(std::max<int64_t>(0, std::min<int64_t>(ms, 1 << 30)));
        timeout_ms = timeout_ms < 0 ? v : std::min(timeout_ms, v);
      };
      if (kill_armed_ && !killed) until(kill_at_);
      if (drain_until) until(*drain_until);
      ::poll(fds.data(), fds.size(), timeout_ms);
      if (fds[0].revents & POLLIN) {
        unsigned char sigs[64];
        ssize_t n;
        while ((n = ::read(g_signal_pipe[0], sigs, sizeof(sigs))) > 0) {
          for (ssize_t i = 0; i < n; ++i) {
            const int sig = sigs[i];
            if (sig == SIGCHLD) continue;
            if (received_ == 0) received_ = sig;
            forward_signal(sig);  // to every rank
          }
        }
      }
      reap();
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents) pump(*owners[i].first, *owners[i].second);
      }
      if (kill_armed_ && !killed && Clock::now() >= kill_at_) {
        signal_all(SIGKILL);
        killed = true;
      }
    }
  }

  int finish() {
    for (auto& r : ranks_) {
      for (auto& s : r.streams) {
        if (s.fd >= 0) {
          if (!s.partial.empty()) emit(r, s, s.partial);
          ::close(s.fd);
        }
      }
      if (r.log_fd >= 0) ::close(r.log_fd);
    }
    if (received_ != 0) {
      write_all(2, "mixgrad-run: received " + std::string(strsignal(received_)) +
                       "; forwarded it to every rank\n");
      return 128 + received_;
    }
    if (failed_ >= 0) {
      const Rank& r = ranks_[std::size_t(failed_)];
      int stopped = 0;
      for (const auto& o : ranks_) stopped += &o != &r;
      std::string msg = "mixgrad-run: rank " + std::to_string(r.rank) + " (local rank " +
                        std::to_string(r.local_rank) + ", pid " + std::to_string(r.pid) + ") " +
                        r.how + "; stopped the other " + std::to_string(stopped) + " local rank(s)\n";
      if (!r.tail.empty()) {
        msg += "mixgrad-run: the last " + std::to_string(r.tail.size()) + " lines of rank " +
               std::to_string(r.rank) + ":\n";
        for (const auto& line : r.tail) msg += "  " + line + "\n";
      }
      write_all(2, msg);
      return r.status;
    }
    return 0;
  }

  const LaunchOptions& o_;
  std::vector<Rank> ranks_;
  bool stopping_ = false;
  Clock::time_point kill_at_{};
  bool kill_armed_ = false;    // SIGKILL at kill_at_
  int signals_received_ = 0;  // SIGINT/SIGTERM received and forwarded
  int failed_ = -1;   // index into ranks_ of the first failing rank
  int received_ = 0;  // SIGINT or SIGTERM received by the launcher
};

}  // namespace

int run_job(const LaunchOptions& options) { return Supervisor(options).run(); }

}  // namespace mg::launcher
