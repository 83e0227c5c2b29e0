#include "security.hpp"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

#include "service.hpp"

namespace gpusampler::server {
namespace {

std::string Trim(const std::string& s) {
  const char* ws = " \t\r\n\f\v";
  const size_t begin = s.find_first_not_of(ws);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(ws) - begin + 1);
}

// Every byte compared, so the time taken does not reveal the length of a matching prefix.
bool SameBytes(const std::string& a, const std::string& b) {
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < b.size(); ++i) {
    diff |= static_cast<unsigned>(b[i] ^ (i < a.size() ? a[i] : 0));
  }
  return diff == 0;
}

// A PEM file the TLS provider will watch: readable and holding a PEM block now, so that a
// typo fails the start rather than every handshake.
Status CheckPemFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return InvalidArgument(flag + " " + path + ": cannot read the file");
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return InvalidArgument(flag + " " + path + ": no PEM block in the file");
  }
  return Status::Ok();
}

class MetadataChecker final : public grpc::AuthMetadataProcessor {
 public:
  explicit MetadataChecker(const ServerConfig& config) : config_(config) {}
  // Runs inline on gRPC's thread: the check is a few string compares.
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata*,
                       OutputMetadata*) override {
    try {
      return ToGrpcStatus(CheckCallMetadata(config_, metadata));
    } catch (...) {  // bad_alloc: refuse the call rather than end the process
      return ToGrpcStatus(ResourceExhausted("server out of memory while checking the call"));
    }
  }

 private:
  const ServerConfig config_;
};

}  // namespace

Status LoadTokens(const std::string& path, std::vector<std::string>* tokens) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("--auth-token-file " + path + ": cannot read the file");
  tokens->clear();
  for (std::string line; std::getline(in, line);) {
    std::string token = Trim(line);
    if (!token.empty()) tokens->push_back(std::move(token));
  }
  if (tokens->empty())
    return InvalidArgument("--auth-token-file " + path + ": no token in the file");
  return Status::Ok();
}

Status CheckBearer(const std::vector<std::string>& tokens,
                   const std::vector<std::string>& authorization) {
  if (tokens.empty()) return Status::Ok();
  if (authorization.empty()) {
    return Status(Code::kUnauthenticated, "missing authorization metadata (Bearer token)");
  }
  if (authorization.size() > 1) {
    return Status(Code::kUnauthenticated,
                  std::to_string(authorization.size()) +
                      " authorization headers; send exactly one (Bearer token)");
  }
  bool match = false;
  for (const std::string& token : tokens) match |= SameBytes(authorization[0], "Bearer " + token);
  if (!match) return Status(Code::kUnauthenticated, "wrong bearer token");
  return Status::Ok();
}

bool OpenMethod(const std::string& path) { return path.rfind("/grpc.health.v1.Health/", 0) == 0; }

Status CheckCallMetadata(const ServerConfig& config,
                         const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  std::string path;
  std::vector<std::string> authorization;
  for (const auto& [key, value] : metadata) {
    const std::string k(key.data(), key.size());
    if (k == ":path") {
      path.assign(value.data(), value.size());
    } else if (k == "authorization") {
      authorization.emplace_back(value.data(), std::min<size_t>(value.size(), 4096));
    } else if (k == "grpc-encoding" && !config.accept_compression) {
      const std::string encoding(value.data(), std::min<size_t>(value.size(), 64));
      if (encoding != "identity") {
        return InvalidArgument("compressed requests (grpc-encoding " + encoding +
                               ") are refused; the server accepts them with "
                               "--accept-compression");
      }
    }
  }
  if (OpenMethod(path)) return Status::Ok();
  return CheckBearer(config.auth_tokens, authorization);
}

Status MakeServerCredentials(const ServerConfig& config,
                             std::shared_ptr<grpc::ServerCredentials>* credentials) {
  const bool tls = !config.tls_cert_file.empty() || !config.tls_key_file.empty();
  if (!tls) {
    if (!config.tls_client_ca_file.empty()) {
      return InvalidArgument("--tls-client-ca-file needs --tls-cert-file and --tls-key-file");
    }
    *credentials = grpc::InsecureServerCredentials();
    return Status::Ok();
  }
  if (config.tls_cert_file.empty() || config.tls_key_file.empty()) {
    return InvalidArgument("--tls-cert-file and --tls-key-file go together (one is missing)");
  }
  for (const auto& [flag, path] :
       {std::pair<std::string, std::string>{"--tls-cert-file", config.tls_cert_file},
        {"--tls-key-file", config.tls_key_file},
        {"--tls-client-ca-file", config.tls_client_ca_file}}) {
    if (path.empty()) continue;
    if (Status s = CheckPemFile(flag, path); !s.ok()) return s;
  }
  const bool mutual = !config.tls_client_ca_file.empty();
  const auto refresh = static_cast<unsigned>(config.tls_refresh_seconds);
  auto provider =
      mutual ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                   config.tls_key_file, config.tls_cert_file, config.tls_client_ca_file, refresh)
             : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                   config.tls_key_file, config.tls_cert_file, refresh);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (mutual) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  *credentials = grpc::experimental::TlsServerCredentials(options);
  (*credentials)->SetAuthMetadataProcessor(std::make_shared<MetadataChecker>(config));
  spdlog::info("TLS on ({}), certificates re-read every {} s", mutual ? "mutual" : "server-side",
               refresh);
  return Status::Ok();
}

}  // namespace gpusampler::server
