#pragma once
/// A minimal HTTP/1.1 client for the OTLP sink (sinks/otlp_http_sink.hpp, its only user): parse an
/// http:// URL, POST one body on a plain socket with every step but name resolution bounded by a
/// deadline, read the status. Opt-in: the umbrella header and the embedded inspector do not
/// include it (it brings <sys/socket.h> and <netdb.h>); the plugin does. Cold path, exporter thread.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ncclinsp/detail/env.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::detail {

struct http_url {
  std::string host, port = "80", path = "/";
  std::string error;  ///< non-empty when the URL is unusable
};

/// Parses http://host[:port][/path], host may be [IPv6]. https and anything else set `error`.
inline http_url parse_http_url(std::string_view u) {
  http_url r;
  const auto scheme_end = u.find("://");
  if (scheme_end == std::string_view::npos) {
    r.error = "not a URL (expected http://host:port/path)";
    return r;
  }
  const std::string scheme = ascii_lower(u.substr(0, scheme_end));
  if (scheme == "https") {
    r.error =
        "https:// is not supported (this exporter has no TLS); use an http:// endpoint such as a local OpenTelemetry Collector";
    return r;
  }
  if (scheme != "http") {
    r.error = "unsupported scheme \"" + scheme + "\" (only http://)";
    return r;
  }
  std::string_view rest = u.substr(scheme_end + 3);
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) r.path = std::string(rest.substr(slash));
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  if (!authority.empty() && authority[0] == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) {
      r.error = "unterminated IPv6 address";
      return r;
    }
    r.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty()) {
      if (authority[0] != ':') {
        r.error = "junk after the IPv6 address";
        return r;
      }
      r.port = std::string(authority.substr(1));
    }
  } else {
    const auto colon = authority.find(':');
    r.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) r.port = std::string(authority.substr(colon + 1));
  }
  long long p = 0;
  if (r.host.empty())
    r.error = "no host";
  else if (!parse_int(r.port, p) || p < 1 || p > 65535)
    r.error = "bad port \"" + r.port + "\"";
  if (r.path.empty()) r.path = "/";
  return r;
}

struct http_result {
  int status = 0;     ///< HTTP status; 0 on a transport error
  std::string error;  ///< transport error text
};

/// One POST, all steps bounded by `deadline` (except getaddrinfo). Cold path.
inline http_result http_post(const http_url& url, const std::vector<std::pair<std::string, std::string>>& headers,
                             const std::string& body, std::chrono::steady_clock::time_point deadline) {
  using clk = std::chrono::steady_clock;
  http_result res;
  auto remaining_ms = [&] {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clk::now()).count();
    return ms > 0 ? static_cast<int>(ms < 1000000 ? ms : 1000000) : 0;
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (const int rc = ::getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &ai); rc != 0) {
    res.error = "cannot resolve " + url.host + ": " + ::gai_strerror(rc);
    return res;
  }
  int fd = -1;
  for (addrinfo* p = ai; p && fd < 0; p = p->ai_next) {
    fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, p->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
      int err = errno;
      if (err == EINPROGRESS) {
        pollfd pfd{fd, POLLOUT, 0};
        const int n = ::poll(&pfd, 1, remaining_ms());
        socklen_t len = sizeof err;
        if (n <= 0)
          err = n == 0 ? ETIMEDOUT : errno;
        else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
          err = errno;
      }
      if (err != 0 && err != EINPROGRESS) {
        res.error = "connect to " + url.host + ":" + url.port + ": " + std::strerror(err);
        ::close(fd);
        fd = -1;
      }
    }
  }
  ::freeaddrinfo(ai);
  if (fd < 0) {
    if (res.error.empty()) res.error = "cannot connect to " + url.host + ":" + url.port;
    return res;
  }
  std::string req = "POST " + url.path + " HTTP/1.1\r\nHost: ";
  req += url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  if (url.port != "80") req += ":" + url.port;
  req +=
      "\r\nContent-Type: application/json\r\nAccept: application/json\r\nConnection: close\r\nUser-Agent: ncclinsp/" NCCLINSP_VERSION_STRING
      "\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  req += "\r\n";
  req += body;
  std::size_t off = 0;
  while (off < req.size()) {
    pollfd pfd{fd, POLLOUT, 0};
    const int n = ::poll(&pfd, 1, remaining_ms());
    if (n <= 0) {
      res.error = n == 0 ? "send timed out" : std::string("poll: ") + std::strerror(errno);
      ::close(fd);
      return res;
    }
    const ssize_t w = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      res.error = std::string("send: ") + std::strerror(errno);
      ::close(fd);
      return res;
    }
    off += static_cast<std::size_t>(w);
  }
  // Response: status line and headers, then Content-Length bytes of body (or up to EOF), max 64 KiB.
  std::string resp;
  std::size_t header_end = std::string::npos, want = std::string::npos;
  char buf[4096];
  while (resp.size() < 65536) {
    if (header_end != std::string::npos && want != std::string::npos && resp.size() >= header_end + want) break;
    pollfd pfd{fd, POLLIN, 0};
    const int n = ::poll(&pfd, 1, remaining_ms());
    if (n <= 0) {
      if (header_end != std::string::npos) break;  // status known; the body does not matter
      res.error = n == 0 ? "no response before the timeout" : std::string("poll: ") + std::strerror(errno);
      ::close(fd);
      return res;
    }
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (r <= 0) break;
    resp.append(buf, static_cast<std::size_t>(r));
    if (header_end == std::string::npos && (header_end = resp.find("\r\n\r\n")) != std::string::npos) {
      header_end += 4;
      const std::string lower = ascii_lower(std::string_view(resp).substr(0, header_end));
      if (const auto cl = lower.find("\r\ncontent-length:"); cl != std::string::npos)
        want = std::strtoull(lower.c_str() + cl + 17, nullptr, 10);
    }
  }
  ::close(fd);
  if (resp.rfind("HTTP/1.", 0) != 0 || resp.size() < 12) {
    res.error = "malformed HTTP response";
    return res;
  }
  res.status = std::atoi(resp.c_str() + 9);
  if (res.status < 100 || res.status > 599) {
    res.error = "malformed HTTP status";
    res.status = 0;
  }
  return res;
}

}  // namespace ncclinsp::detail
