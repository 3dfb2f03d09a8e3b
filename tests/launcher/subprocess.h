// A child process for tests: started with extra environment variables, its stdout and stderr
// captured, and every wait bounded (on timeout it is killed with its process group), so a test
// of the launcher or of the distributed layer can never hang the suite.
// Decision: header-only, POSIX fork/exec; used by tests/launcher and tests/distributed.
//
//   Subprocess p({MG_RUN, "--nproc-per-node", "2", MG_CHILD, "env"});
//   Subprocess::Result r = p.wait(30.0);      // r.status, r.out, r.err, r.timed_out, r.seconds
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace mg::test {

class Subprocess {
 public:
  struct Result {
    int status = -1;  // exit code, or 128+signal
    bool timed_out = false;
    std::string out, err;
    double seconds = 0;
  };

  explicit Subprocess(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& env = {}) {
    start_ = std::chrono::steady_clock::now();
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      const char* msg = "Subprocess: exec failed\n";
      [[maybe_unused]] ssize_t n = ::write(2, msg, std::strlen(msg));
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
    ::close(out[1]);
    ::close(err[1]);
    fds_[0] = out[0];
    fds_[1] = err[0];
    for (int fd : fds_) ::fcntl(fd, F_SETFL, O_NONBLOCK);
  }
  ~Subprocess() {
    if (!reaped_) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& out() const { return result_.out; }

  // Reads output until `done(stdout so far)` holds or `timeout_s` passes; returns whether it held.
  bool read_until(const std::function<bool(const std::string&)>& done, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + to_duration(timeout_s);
    while (!done(result_.out)) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      if (!pump(20) && reaped_) return done(result_.out);
    }
    return true;
  }

  // Waits for exit (at most timeout_s; then kills the process group) and returns its result.
  Result wait(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + to_duration(timeout_s);
    while (!reaped_) {
      pump(20);
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        result_.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      } else if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(-pid_, SIGKILL);
        ::kill(pid_, SIGKILL);
        int st2;
        ::waitpid(pid_, &st2, 0);
        reaped_ = true;
        result_.timed_out = true;
      }
    }
    result_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    // Drain what is left (bounded: a grandchild may hold the pipes).
    const auto drain = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while ((fds_[0] >= 0 || fds_[1] >= 0) && std::chrono::steady_clock::now() < drain) pump(20);
    return result_;
  }

 private:
  static std::chrono::steady_clock::duration to_duration(double s) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
  }
  // Polls the pipes for up to ms milliseconds; false when both are closed.
  bool pump(int ms) {
    std::vector<pollfd> p;
    for (int fd : fds_) {
      if (fd >= 0) p.push_back({fd, POLLIN, 0});
    }
    if (p.empty()) {
      ::usleep(ms * 1000);
      return false;
    }
    ::poll(p.data(), p.size(), ms);
    for (int i = 0; i < 2; ++i) {
      if (fds_[i] < 0) continue;
      char buf[65536];
      for (;;) {
        ssize_t k = ::read(fds_[i], buf, sizeof(buf));
        if (k > 0) {
          (i == 0 ? result_.out : result_.err).append(buf, std::size_t(k));
          continue;
        }
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
        ::close(fds_[i]);
        fds_[i] = -1;
        break;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  bool reaped_ = false;
  Result result_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mg::test
