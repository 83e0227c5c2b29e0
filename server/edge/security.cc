#include "edge/security.hpp"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/status.hpp"

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

// A whole file (a PEM file is small; more than 1 MiB is not one): false when unreadable.
bool ReadSmallFile(const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream out;
  out << in.rdbuf();
  if (in.bad()) return false;
  *text = out.str();
  return text->size() <= (size_t{1} << 20);
}

// A PEM file named by `flag`, read now: INVALID_ARGUMENT naming the flag when unreadable or
// without a PEM block.
Status ReadPemFile(const std::string& flag, const std::string& path, std::string* text) {
  if (!ReadSmallFile(path, text))
    return InvalidArgument(flag + " " + path + ": cannot read the file");
  if (text->find("-----BEGIN ") == std::string::npos) {
    return InvalidArgument(flag + " " + path + ": no PEM block in the file");
  }
  return Status::Ok();
}

// Written under a temporary name and renamed, so that gRPC's watcher never reads half a file.
bool WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

BioPtr MemBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The certificates of a PEM bundle, each passed to `each`; the number parsed.
int ForEachCert(const std::string& pem, const std::function<void(X509*)>& each) {
  BioPtr bio = MemBio(pem);
  int n = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    ++n;
    if (each) each(cert);
    X509_free(cert);
  }
  ERR_clear_error();  // the end of the bundle reads as an error
  return n;
}

class MetadataChecker final : public grpc::AuthMetadataProcessor {
 public:
  MetadataChecker(const ServerConfig& config, std::shared_ptr<TokenSet> tokens,
                  RefusalSink on_refused)
      : config_(config), tokens_(std::move(tokens)), on_refused_(std::move(on_refused)) {}
  // Runs inline on gRPC's thread: the check is a few string compares.
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata*,
                       OutputMetadata*) override {
    try {
      const auto tokens = tokens_->Get();
      const Status status = CheckCallMetadata(config_, metadata, tokens.get());
      if (!status.ok() && on_refused_) {
        std::string path;
        const auto it = metadata.find(":path");
        if (it != metadata.end()) path.assign(it->second.data(), it->second.size());
        on_refused_(path, status);
      }
      return ToGrpcStatus(status);
    } catch (...) {  // gRPC -> server (bad_alloc): refuse the call rather than end the process
      return ToGrpcStatus(FromCurrentException("checking the call"));
    }
  }

 private:
  const ServerConfig config_;
  const std::shared_ptr<TokenSet> tokens_;
  const RefusalSink on_refused_;
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
                         const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                         const std::vector<std::string>* tokens) {
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
  return CheckBearer(tokens ? *tokens : config.auth_tokens, authorization);
}

std::string CheckTlsPair(const std::string& cert_pem, const std::string& key_pem,
                         const std::string& ca_pem) {
  X509* first = nullptr;
  const int certs = ForEachCert(cert_pem, [&](X509* c) {
    if (!first) {
      X509_up_ref(c);
      first = c;
    }
  });
  std::unique_ptr<X509, void (*)(X509*)> leaf(first, X509_free);
  if (certs == 0) return "the certificate file holds no certificate that parses";
  BioPtr bio = MemBio(key_pem);
  std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  ERR_clear_error();
  if (!key) return "the key file holds no private key that parses";
  if (X509_check_private_key(leaf.get(), key.get()) != 1) {
    ERR_clear_error();
    return "the private key does not match the certificate";
  }
  if (!ca_pem.empty() && ForEachCert(ca_pem, nullptr) == 0) {
    return "the client CA file holds no certificate that parses";
  }
  return "";
}

namespace {

std::string AsnTime(const ASN1_TIME* t) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), t);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

}  // namespace

std::string CertificateTimeProblem(const std::string& cert_pem) {
  std::string problem;
  bool first = true;
  ForEachCert(cert_pem, [&](X509* c) {
    if (!first) return;
    first = false;
    if (X509_cmp_current_time(X509_get0_notAfter(c)) < 0) {
      problem = "the certificate expired at " + AsnTime(X509_get0_notAfter(c));
    } else if (X509_cmp_current_time(X509_get0_notBefore(c)) > 0) {
      problem = "the certificate is not valid before " + AsnTime(X509_get0_notBefore(c));
    }
  });
  return problem;
}

namespace {

void WarnCertificateTime(const std::string& path, const std::string& cert_pem) {
  if (const std::string why = CertificateTimeProblem(cert_pem); !why.empty()) {
    spdlog::critical("--tls-cert-file {}: {}: clients that check it refuse every connection", path,
                     why);
  }
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const ServerConfig& config,
                                                               const std::string& cert_dir,
                                                               std::shared_ptr<TokenSet> tokens,
                                                               RefusalSink on_refused) {
  if (config.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  const bool mutual = !config.tls_client_ca_file.empty();
  // The private copy changes only when a good set was written: reading it every second
  // costs little and puts a rotation in service within about a second of its check.
  constexpr unsigned kRefresh = 1;
  const std::string key = cert_dir + "/key.pem", cert = cert_dir + "/cert.pem";
  auto provider = mutual ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                               key, cert, cert_dir + "/ca.pem", kRefresh)
                         : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                               key, cert, kRefresh);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (mutual) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  auto credentials = grpc::experimental::TlsServerCredentials(options);
  credentials->SetAuthMetadataProcessor(
      std::make_shared<MetadataChecker>(config, std::move(tokens), std::move(on_refused)));
  return credentials;
}

CredentialManager::~CredentialManager() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  RemovePrivateFiles();
}

void CredentialManager::RemovePrivateFiles() {
  if (private_dir_.empty() || removed_.exchange(true)) return;
  std::error_code ignored;
  std::filesystem::remove_all(private_dir_, ignored);
}

Status CredentialManager::Init(RefusalSink on_refused) {
  if (!config_.auth_token_file.empty()) {
    std::vector<std::string> tokens;
    GPUSAMPLER_RETURN_IF_ERROR(LoadTokens(config_.auth_token_file, &tokens));
    tokens_->Set(std::move(tokens));
  } else {
    tokens_->Set(config_.auth_tokens);
  }
  const bool tls = !config_.tls_cert_file.empty() || !config_.tls_key_file.empty();
  if (!tls) {
    if (!config_.tls_client_ca_file.empty()) {
      return InvalidArgument("--tls-client-ca-file needs --tls-cert-file and --tls-key-file");
    }
    credentials_ = grpc::InsecureServerCredentials();
    return Status::Ok();
  }
  if (config_.tls_cert_file.empty() || config_.tls_key_file.empty()) {
    return InvalidArgument("--tls-cert-file and --tls-key-file go together (one is missing)");
  }
  std::string cert, key, ca;
  GPUSAMPLER_RETURN_IF_ERROR(ReadPemFile("--tls-cert-file", config_.tls_cert_file, &cert));
  GPUSAMPLER_RETURN_IF_ERROR(ReadPemFile("--tls-key-file", config_.tls_key_file, &key));
  if (!config_.tls_client_ca_file.empty()) {
    GPUSAMPLER_RETURN_IF_ERROR(
        ReadPemFile("--tls-client-ca-file", config_.tls_client_ca_file, &ca));
  }
  if (const std::string why = CheckTlsPair(cert, key, ca); !why.empty()) {
    return InvalidArgument("--tls-cert-file " + config_.tls_cert_file + " / --tls-key-file " +
                           config_.tls_key_file + ": " + why);
  }
  const char* tmpdir = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/gpusampler-tls-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    return Status(Code::kInternal, "cannot create a private directory for the TLS files (" + tmpl +
                                       "): set TMPDIR to a writable directory");
  }
  WarnCertificateTime(config_.tls_cert_file, cert);  // served anyway: a clock may be wrong
  private_dir_ = tmpl;                               // mkdtemp: mode 0700
  if (!WriteAtomically(private_dir_ + "/key.pem", key) ||
      !WriteAtomically(private_dir_ + "/cert.pem", cert) ||
      (!ca.empty() && !WriteAtomically(private_dir_ + "/ca.pem", ca))) {
    return Status(Code::kInternal, "cannot write the TLS files to " + private_dir_);
  }
  good_cert_ = std::move(cert);
  good_key_ = std::move(key);
  good_ca_ = std::move(ca);
  credentials_ = MakeServerCredentials(config_, private_dir_, tokens_, std::move(on_refused));
  spdlog::info("TLS on ({}), the files re-read every {} s",
               config_.tls_client_ca_file.empty() ? "server-side" : "mutual",
               config_.tls_refresh_seconds);
  return Status::Ok();
}

void CredentialManager::StartRefresh() {
  if (config_.auth_token_file.empty() && private_dir_.empty()) return;
  thread_ = std::thread([this] { RefreshLoop(); });
}

void CredentialManager::RefreshLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::seconds(config_.tls_refresh_seconds),
                       [this] { return stop_; })) {
    lock.unlock();
    try {
      Refresh();
    } catch (...) {  // the refresh thread's top: an escaping exception would end the process
      spdlog::error("{}", FromCurrentException("re-reading the credentials failed").message());
    }
    lock.lock();
  }
}

void CredentialManager::Refresh() {
  if (!config_.auth_token_file.empty()) {
    std::vector<std::string> tokens;
    if (Status s = LoadTokens(config_.auth_token_file, &tokens); !s.ok()) {
      // Once per streak of the same problem, not every refresh (issue 31).
      if (s.message() != last_token_error_) {
        spdlog::error("{}; the {} token(s) read before stay accepted", s.message(),
                      tokens_->Get()->size());
        last_token_error_ = s.message();
      }
      return RefreshTls();
    }
    last_token_error_.clear();
    if (tokens != *tokens_->Get()) {
      spdlog::info("--auth-token-file re-read: {} token(s) accepted now", tokens.size());
      tokens_->Set(std::move(tokens));
    }
  }
  RefreshTls();
}

void CredentialManager::RefreshTls() {
  if (private_dir_.empty()) return;
  std::string cert, key, ca;
  Status s = ReadPemFile("--tls-cert-file", config_.tls_cert_file, &cert);
  if (s.ok()) s = ReadPemFile("--tls-key-file", config_.tls_key_file, &key);
  if (s.ok() && !config_.tls_client_ca_file.empty()) {
    s = ReadPemFile("--tls-client-ca-file", config_.tls_client_ca_file, &ca);
  }
  if (s.ok() && cert == good_cert_ && key == good_key_ && ca == good_ca_) return;
  if (s.ok()) {
    if (const std::string why = CheckTlsPair(cert, key, ca); !why.empty()) {
      s = InvalidArgument("--tls-cert-file " + config_.tls_cert_file + " / --tls-key-file " +
                          config_.tls_key_file + ": " + why);
    }
  }
  if (!s.ok()) {
    if (s.message() != last_error_) {  // once per distinct problem, not every refresh
      spdlog::error("TLS files not taken: {}; the last good certificate and key keep serving",
                    s.message());
      last_error_ = s.message();
    }
    return;
  }
  last_error_.clear();
  // Key and certificate are each replaced whole; gRPC's watcher rereads a pair whose files
  // change while it reads them.
  if (!WriteAtomically(private_dir_ + "/key.pem", key) ||
      !WriteAtomically(private_dir_ + "/cert.pem", cert) ||
      (!ca.empty() && !WriteAtomically(private_dir_ + "/ca.pem", ca))) {
    spdlog::error("cannot write the TLS files to {}; the last good ones keep serving",
                  private_dir_);
    return;
  }
  WarnCertificateTime(config_.tls_cert_file, cert);
  good_cert_ = std::move(cert);
  good_key_ = std::move(key);
  good_ca_ = std::move(ca);
  spdlog::info("TLS files re-read: the new certificate serves new connections");
}

}  // namespace gpusampler::server
