#pragma once
// A loopback HTTP/1.1 server thread for tests: accepts connections on 127.0.0.1:<ephemeral>,
// reads one request each (headers + Content-Length body), answers with the next scripted status
// (then 200), and keeps every request for inspection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace test_http {

struct request {
  std::string method, path;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  int answered = 0;
};

class listener {
 public:
  explicit listener(std::vector<int> script = {}, int delay_ms = 0)
      : script_(script.begin(), script.end()), delay_ms_(delay_ms) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 16);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    th_ = std::thread([this] { run(); });
  }
  ~listener() {
    stop_ = true;
    th_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  std::string url(const std::string& path = "/v1/metrics") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::vector<request> requests() {
    std::lock_guard lk(mu_);
    return reqs_;
  }
  /// Waits until at least n requests arrived (or the timeout).
  bool wait_for(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      {
        std::lock_guard lk(mu_);
        if (reqs_.size() >= n) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

 private:
  void run() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      serve(c);
      ::close(c);
    }
  }
  void serve(int c) {
    std::string buf;
    char tmp[4096];
    std::size_t hend = std::string::npos, want = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < end) {
      if (hend != std::string::npos && buf.size() >= hend + want) break;
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t r = ::recv(c, tmp, sizeof tmp, 0);
      if (r <= 0) break;
      buf.append(tmp, static_cast<std::size_t>(r));
      if (hend == std::string::npos && (hend = buf.find("\r\n\r\n")) != std::string::npos) {
        hend += 4;
        request q;
        parse_head(buf.substr(0, hend), q);
        want = q.headers.count("content-length") ? std::strtoull(q.headers["content-length"].c_str(), nullptr, 10) : 0;
      }
    }
    if (hend == std::string::npos) return;
    request q;
    parse_head(buf.substr(0, hend), q);
    q.body = buf.substr(hend);
    int status = 200;
    {
      std::lock_guard lk(mu_);
      if (!script_.empty()) {
        status = script_.front();
        script_.pop_front();
      }
    }
    if (delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    q.answered = status;
    const std::string body = status == 200 ? "{}" : "{\"error\":\"scripted\"}";
    const std::string resp = "HTTP/1.1 " + std::to_string(status) + (status == 200 ? " OK" : " Error") +
                             "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                             "\r\nConnection: close\r\n\r\n" + body;
    {
      std::lock_guard lk(mu_);  // stored before answering: the client sees it once it has the answer
      reqs_.push_back(std::move(q));
    }
    ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
  }
  static void parse_head(const std::string& h, request& q) {
    std::size_t pos = h.find("\r\n");
    const std::string line = h.substr(0, pos);
    const auto sp1 = line.find(' '), sp2 = line.rfind(' ');
    q.method = line.substr(0, sp1);
    q.path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    while (pos != std::string::npos && pos + 2 < h.size()) {
      const std::size_t next = h.find("\r\n", pos + 2);
      const std::string l = h.substr(pos + 2, next - pos - 2);
      pos = next;
      const auto colon = l.find(':');
      if (colon == std::string::npos) continue;
      std::string k = l.substr(0, colon);
      for (auto& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      std::string v = l.substr(colon + 1);
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      q.headers[k] = v;
    }
  }

  int fd_ = -1, port_ = 0;
  std::deque<int> script_;
  int delay_ms_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<request> reqs_;
  std::thread th_;
};

}  // namespace test_http
