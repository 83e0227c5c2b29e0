#include "edge/request_bytes.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <limits>
#include <random>

#include "core/tensor_check.hpp"

namespace gpusampler::server {
namespace {

// SampleRequest's tensor fields (labels, features, row_splits, rows, scores).
constexpr int kTensorFields[] = {3, 4, 5, 8, 11};
constexpr int kMaxTensorField = 11;
// Smaller tensors fit protobuf's first reservation anyway.
constexpr int64_t kReserveFromBytes = int64_t{1} << 20;

// Refuses a request whose tensor shapes have more than kMaxRank dims, from the wire bytes,
// before parsing: a shape of 8M one-byte dims would take 64 MiB once parsed. Anything
// malformed is left to the parser. Sets data_bytes[field] to the longest `data` of each
// top-level tensor field (kTensorFields).
Status CheckRankBeforeParse(const grpc::ByteBuffer& bytes, int64_t* data_bytes) {
  using google::protobuf::internal::WireFormatLite;
  grpc::ByteBuffer copy(bytes);  // shares the slices
  grpc::ProtoBufferReader reader(&copy);
  google::protobuf::io::CodedInputStream in(&reader);
  in.SetTotalBytesLimit(std::numeric_limits<int>::max());
  static constexpr const char* kNames[] = {"", "", "",     "labels", "features", "row_splits",
                                           "", "", "rows", "",       "",         "scores"};
  // A varint is at most 10 bytes: kMaxRank dims fit in this many packed bytes.
  constexpr uint32_t kMaxPackedBytes = 10 * kMaxRank;
  while (const uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const bool tensor = field == 3 || field == 4 || field == 5 || field == 8 || field == 11;
    if (!tensor ||
        WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return Status::Ok();
      continue;
    }
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return Status::Ok();
    const auto limit = in.PushLimit(static_cast<int>(length));
    int dims = 0;
    while (const uint32_t inner = in.ReadTag()) {
      if (WireFormatLite::GetTagFieldNumber(inner) == 2) {
        if (WireFormatLite::GetTagWireType(inner) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
          uint32_t packed = 0;
          if (!in.ReadVarint32(&packed)) return Status::Ok();
          if (packed > kMaxPackedBytes) dims = kMaxRank + 1;
          if (!in.Skip(static_cast<int>(packed))) return Status::Ok();
        } else {
          ++dims;
          if (!WireFormatLite::SkipField(&in, inner)) return Status::Ok();
        }
        if (dims > kMaxRank) {
          return InvalidArgument(std::string(kNames[field]) + ".shape has more than " +
                                 std::to_string(kMaxRank) + " dims");
        }
      } else if (WireFormatLite::GetTagFieldNumber(inner) == 3 &&
                 WireFormatLite::GetTagWireType(inner) ==
                     WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        uint32_t size = 0;
        if (!in.ReadVarint32(&size)) return Status::Ok();
        data_bytes[field] = std::max<int64_t>(data_bytes[field], size);
        if (!in.Skip(static_cast<int>(size))) return Status::Ok();
      } else if (!WireFormatLite::SkipField(&in, inner)) {
        return Status::Ok();
      }
    }
    in.PopLimit(limit);
  }
  return Status::Ok();
}

}  // namespace

int64_t ByteOwner::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

void ByteOwner::Add(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  held_ += bytes;
  connection_->fetch_add(bytes, std::memory_order_relaxed);
}

void ByteOwner::Remove(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  bytes = std::min(bytes, held_);
  held_ -= bytes;
  connection_->fetch_sub(bytes, std::memory_order_relaxed);
}

void ByteOwner::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  connection_->fetch_sub(held_, std::memory_order_relaxed);
  held_ = 0;
}

namespace {
thread_local std::shared_ptr<ByteOwner> t_owner;
}  // namespace

std::shared_ptr<ByteOwner> ByteOwner::Current() { return t_owner; }
void ByteOwner::SetCurrent(std::shared_ptr<ByteOwner> owner) { t_owner = std::move(owner); }
ByteOwner::Scope::Scope(std::shared_ptr<ByteOwner> owner) : previous_(std::move(t_owner)) {
  t_owner = std::move(owner);
}
ByteOwner::Scope::~Scope() { t_owner = std::move(previous_); }

ByteBudget::Refusal ByteBudget::TryCharge(int64_t bytes, ByteOwner* owner, Clock::time_point now) {
  const uintptr_t connection = owner ? owner->connection_id() : 0;
  // Fair share: past half the budget only while no other connection waits.
  if (owner && owner->connection_bytes() + bytes > share_limit() && AnotherWaits(connection, now)) {
    Refused(connection, now);
    return Refusal::kOverShare;
  }
  int64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ - used) {
      if (bytes <= limit_) Refused(connection, now);  // over the whole budget: nobody waits
      return Refusal::kFull;
    }
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  if (owner) owner->Add(bytes);
  if (gauge_) gauge_->Increment(static_cast<double>(bytes));
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (used + bytes > peak &&
         !peak_.compare_exchange_weak(peak, used + bytes, std::memory_order_relaxed)) {
  }
  return Refusal::kNone;
}

void ByteBudget::Release(int64_t bytes) {
  if (bytes == 0) return;
  used_.fetch_sub(bytes, std::memory_order_relaxed);
  if (gauge_) gauge_->Decrement(static_cast<double>(bytes));
}

void ByteBudget::Release(int64_t bytes, ByteOwner* owner) {
  Release(bytes);
  if (owner) owner->Remove(bytes);
}

void ByteBudget::Refused(uintptr_t connection, Clock::time_point now) {
  refused_connection_.store(connection, std::memory_order_relaxed);
  refused_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
}

bool ByteBudget::UnderPressure(Clock::time_point now) const {
  const int64_t at = refused_at_.load(std::memory_order_relaxed);
  return at != std::numeric_limits<int64_t>::min() &&
         now.time_since_epoch().count() - at < kPressureWindow.count();
}

bool ByteBudget::AnotherWaits(uintptr_t connection, Clock::time_point now) const {
  if (!UnderPressure(now)) return false;
  const uintptr_t who = refused_connection_.load(std::memory_order_relaxed);
  return who == 0 || who != connection;
}

int64_t ByteBudget::TakePeak() {
  return peak_.exchange(used_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

int64_t BudgetPushbackMs() {
  thread_local std::minstd_rand gen(std::random_device{}());
  return 100 + static_cast<int64_t>(gen() % 100);
}

int64_t FullBudgetPushbackMs() {
  thread_local std::minstd_rand gen(std::random_device{}());
  return 250 + static_cast<int64_t>(gen() % 250);
}

Status Charge(ByteBudget& budget, int64_t bytes, const char* what) {
  const std::shared_ptr<ByteOwner> owner = ByteOwner::Current();
  const ByteBudget::Refusal refusal = budget.TryCharge(bytes, owner.get());
  if (refusal == ByteBudget::Refusal::kNone) return Status::Ok();
  if (refusal == ByteBudget::Refusal::kOverShare) {
    return Status(Code::kResourceExhausted,
                  std::string(what) + " needs " + std::to_string(bytes) +
                      " bytes; this connection already holds " +
                      std::to_string(owner->connection_bytes()) + ", and no connection may hold " +
                      "more than half (" + std::to_string(budget.share_limit()) + ") of the " +
                      std::to_string(budget.limit()) +
                      "-byte budget while other calls wait (--max-inflight-bytes)",
                  FullBudgetPushbackMs());
  }
  const std::string message = std::string(what) + " needs " + std::to_string(bytes) + " bytes; " +
                              std::to_string(budget.used()) + " of " +
                              std::to_string(budget.limit()) +
                              " are held by other requests (--max-inflight-bytes)";
  // Larger than the whole budget: no retry can succeed.
  return Status(Code::kResourceExhausted, message,
                bytes > budget.limit() ? kDoNotRetry : FullBudgetPushbackMs());
}

Status ParseRequest(const grpc::ByteBuffer& bytes, v1::SampleRequest* request,
                    const std::string& what) {
  int64_t data_bytes[kMaxTensorField + 1] = {};
  GPUSAMPLER_RETURN_IF_ERROR(CheckRankBeforeParse(bytes, data_bytes));
  // Protobuf reserves at most 50 MB for a bytes field and grows past that by doubling: a
  // 56 MiB tensor peaked at 150 MB while parsed and kept 100 MB. Reserved at its size here,
  // the parse appends in place (issue 31, item 7). Merging into a cleared message is parsing.
  request->Clear();
  const int64_t most = static_cast<int64_t>(bytes.Length());
  for (const int field : kTensorFields) {
    if (data_bytes[field] < kReserveFromBytes) continue;
    const auto* descriptor = v1::SampleRequest::descriptor()->FindFieldByNumber(field);
    auto* tensor = static_cast<v1::Tensor*>(
        v1::SampleRequest::GetReflection()->MutableMessage(request, descriptor));
    tensor->mutable_data()->reserve(static_cast<size_t>(std::min(data_bytes[field], most)));
  }
  grpc::ByteBuffer copy(bytes);  // shares the slices
  grpc::ProtoBufferReader reader(&copy);
  if (!request->MergeFromBoundedZeroCopyStream(&reader, static_cast<int>(most)) ||
      !reader.status().ok()) {
    return InvalidArgument(what + " (" + std::to_string(bytes.Length()) +
                           " bytes) does not parse as a gpusampler.v1.SampleRequest");
  }
  return Status::Ok();
}

}  // namespace gpusampler::server
