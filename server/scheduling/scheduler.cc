#include "scheduling/scheduler.hpp"

#include <algorithm>
#include <new>

#include <spdlog/spdlog.h>

#include <random>

#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::server {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
int64_t Micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

// Retry pushback of a full queue: 100 ms (a few launches drain a full default queue) plus
// up to 100 ms of jitter, so that clients shed together do not all come back together.
int64_t QueueFullPushbackMs() {
  thread_local std::minstd_rand gen(std::random_device{}());
  return 100 + static_cast<int64_t>(gen() % 100);
}

}  // namespace

void FairQueue::push_back(std::shared_ptr<Job> job) {
  auto& lane = lanes_[job->connection];
  if (lane.empty()) turns_.push_back(job->connection);
  lane.push_back(std::move(job));
  ++size_;
}

size_t FairQueue::NextWithin(int64_t max_elements) const {
  if (max_elements <= 0) return 0;
  for (size_t turn = 0; turn < turns_.size(); ++turn) {
    if (at(turn)->num_elements() <= max_elements) return turn;
  }
  return turns_.size();
}

void FairQueue::pop(size_t turn) {
  const auto it = lanes_.find(turns_[turn]);
  std::string connection = std::move(turns_[turn]);
  turns_.erase(turns_.begin() + static_cast<std::ptrdiff_t>(turn));
  it->second.pop_front();
  --size_;
  if (it->second.empty()) {
    lanes_.erase(it);
  } else {
    turns_.push_back(std::move(connection));  // its next job waits for the others' turns
  }
}

std::deque<std::shared_ptr<Job>> FairQueue::TakeAll() {
  std::deque<std::shared_ptr<Job>> all;
  while (!empty()) {
    all.push_back(front());
    pop_front();
  }
  return all;
}

Scheduler::Scheduler(Options options, Metrics* metrics, std::function<void(const Status&)> on_fatal)
    : options_(options), metrics_(metrics), on_fatal_(std::move(on_fatal)) {}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::AddWorker(std::unique_ptr<Worker> worker, int device_index, WorkerOptions options) {
  auto slot = std::make_unique<WorkerSlot>();
  slot->worker = std::move(worker);
  slot->device_index = device_index;
  slot->options = options;
  slot->options.max_job_elements = std::max<int64_t>(0, options.max_job_elements);
  if (slot->options.max_job_elements > 0) has_express_ = true;
  workers_.push_back(std::move(slot));
}

Status Scheduler::Start() {
  // Every worker warms up before any serves, so the first client pays no lazy
  // initialisation.
  for (auto& slot : workers_) {
    GPUSAMPLER_RETURN_IF_ERROR(WarmUp(slot->worker.get()));
  }
  for (auto& slot : workers_) {
    WorkerSlot* s = slot.get();
    s->thread = std::thread([this, s] { Loop(s); });
  }
  return Status::Ok();
}

Status Scheduler::Submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_ || failed_) return Unavailable("server is draining; retry another replica");
    if (static_cast<int64_t>(queue_.size()) >= options_.queue_capacity) {
      return Status(Code::kResourceExhausted,
                    "queue full (" + std::to_string(options_.queue_capacity) +
                        " requests waiting, --queue-capacity); retry later",
                    QueueFullPushbackMs());
    }
    queue_.push_back(std::move(job));
    has_work_.store(true, std::memory_order_release);
    metrics_->queue_depth().Set(static_cast<double>(queue_.size()));
  }
  if (has_express_) {
    work_cv_.notify_all();
  } else {
    work_cv_.notify_one();
  }
  return Status::Ok();
}

void Scheduler::StopAccepting() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
}

bool Scheduler::WaitIdle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [this] { return queue_.empty() && running_ == 0; });
}

void Scheduler::Stop() { Stop(Clock::time_point::max()); }

bool Scheduler::Stop(Clock::time_point deadline) {
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return true;
    stop_ = true;
    accepting_ = false;
    left = queue_.TakeAll();
    has_work_.store(true, std::memory_order_release);  // ends any spin
    metrics_->queue_depth().Set(0);
  }
  work_cv_.notify_all();
  for (auto& job : left) job->done(Unavailable("server shut down before the request ran"));
  if (deadline != Clock::time_point::max()) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!idle_cv_.wait_until(lock, deadline, [this] { return running_ == 0; })) return false;
  }
  for (auto& slot : workers_) {
    if (slot->thread.joinable()) slot->thread.join();
  }
  return true;
}

int64_t Scheduler::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

void Scheduler::SetPausedForTesting(bool paused) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = paused;
  }
  work_cv_.notify_all();
}

bool Scheduler::HasWorkLocked(const WorkerSlot& slot) const {
  return queue_.NextWithin(slot.options.max_job_elements) < queue_.size_turns();
}

void Scheduler::TakeLocked(const WorkerSlot& slot, std::vector<std::shared_ptr<Job>>* batch,
                           int64_t* rows, int64_t* elements) {
  const int64_t limit = slot.options.max_job_elements;
  const int64_t max_elements =
      limit > 0 ? std::min(limit, options_.max_batch_elements) : options_.max_batch_elements;
  int64_t slots = 0;
  for (const auto& job : *batch) slots += job->num_rows() * job->spec.num_samples;
  while (!queue_.empty()) {
    const size_t turn = queue_.NextWithin(limit);
    if (turn == queue_.size_turns()) break;  // only jobs too large for an express worker
    const Job& next = *queue_.at(turn);
    const int64_t r = next.num_rows();
    const int64_t e = next.num_elements();
    // Validation bounds one request's B * K by max_message_bytes; the sum is bounded here.
    const int64_t s = r * next.spec.num_samples;
    if (!batch->empty() && (*rows + r > options_.max_batch_rows || *elements + e > max_elements ||
                            slots + s > options_.max_batch_slots)) {
      break;
    }
    *rows += r;
    *elements += e;
    slots += s;
    batch->push_back(queue_.at(turn));
    queue_.pop(turn);
  }
  has_work_.store(!queue_.empty(), std::memory_order_release);
  metrics_->queue_depth().Set(static_cast<double>(queue_.size()));
}

void Scheduler::Loop(WorkerSlot* slot) {
  std::vector<std::shared_ptr<Job>> batch;
  while (true) {
    batch.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty() && options_.spin_us > 0) {
        // Poll (yielding the core to runnable threads) before parking: waking a parked
        // thread costs tens of microseconds on a busy host, which was most of the service's
        // own latency at low load (bench/results/service-cpu.md).
        lock.unlock();
        const auto until = Clock::now() + std::chrono::microseconds(options_.spin_us);
        while (!has_work_.load(std::memory_order_acquire) && Clock::now() < until) {
          std::this_thread::yield();
        }
        lock.lock();
      }
      work_cv_.wait(lock, [this, slot] { return stop_ || (!paused_ && HasWorkLocked(*slot)); });
      if (stop_) return;
      int64_t rows = 0;
      int64_t elements = 0;
      TakeLocked(*slot, &batch, &rows, &elements);
      // Wait for more only while another launch runs: an idle server launches at once.
      if (options_.max_batch_delay_us > 0 && rows < options_.max_batch_rows && running_ > 0) {
        const auto until =
            batch.front()->accepted + std::chrono::microseconds(options_.max_batch_delay_us);
        while (rows < options_.max_batch_rows && !stop_ && running_ > 0) {
          if (!queue_.empty()) {
            const int64_t before = rows;
            TakeLocked(*slot, &batch, &rows, &elements);
            if (rows == before) break;  // the next job does not fit
            continue;
          }
          if (work_cv_.wait_until(lock, until) == std::cv_status::timeout) {
            TakeLocked(*slot, &batch, &rows, &elements);
            break;
          }
        }
      }
      ++running_;
    }
    Launch(slot, batch);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
      if (running_ == 0 && queue_.empty()) idle_cv_.notify_all();
    }
    // A waiting batch may now be the only one: let it launch.
    work_cv_.notify_all();
  }
}

bool Scheduler::DropIfDead(Job* job, Clock::time_point now) {
  // Dropped before launch: no kernel runs for these.
  if (now >= job->deadline) {
    ++dropped_;
    metrics_->dropped_deadline().Increment();
    job->done(Status(Code::kDeadlineExceeded, "deadline passed while queued"));
    return true;
  }
  if (job->cancelled.load()) {
    ++dropped_;
    metrics_->dropped_cancelled().Increment();
    job->done(Status(Code::kCancelled, "cancelled by the client while queued"));
    return true;
  }
  return false;
}

void Scheduler::Launch(WorkerSlot* slot, std::vector<std::shared_ptr<Job>>& batch) {
  const auto start = Clock::now();
  std::vector<Job*> jobs;
  jobs.reserve(batch.size());
  for (auto& job : batch) {
    if (!DropIfDead(job.get(), start)) jobs.push_back(job.get());
  }
  if (jobs.empty()) return;
  bool failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed = failed_;
  }
  if (failed) {
    for (Job* job : jobs) job->done(Unavailable("device fault; server is shutting down"));
    return;
  }
  RunJobs(slot, jobs, start);
}

void Scheduler::RunJobs(WorkerSlot* slot, const std::vector<Job*>& jobs, Clock::time_point start) {
  DeviceMetrics& dm = metrics_->device(slot->device_index);
  int64_t rows = 0;
  for (const Job* job : jobs) rows += job->num_rows();
  Status status;
  dm.busy.Begin();
  try {
    slot->worker->Run(jobs);
  } catch (...) {  // kernels -> server: the backend throws kernels::Error (or bad_alloc)
    bool device_fault = false;
    status = FromCurrentException("worker failed", &device_fault);
    if (device_fault) {
      dm.busy.End();
      Fatal(status);
      for (Job* job : jobs) job->done(Unavailable(status.message()));
      return;
    }
  }
  dm.busy.End();
  const auto end = Clock::now();
  ++launches_;
  launched_rows_ += rows;
  dm.launches->Increment();
  if (!status.ok() && jobs.size() > 1) {
    // Out of memory (or any other error short of a device fault) with several requests
    // fused: retry each alone, so that only the request at fault fails. Time has passed:
    // a request that died meanwhile gets no kernel.
    for (Job* job : jobs) {
      const auto now = Clock::now();
      if (!DropIfDead(job, now)) RunJobs(slot, {job}, now);
    }
    return;
  }
  dm.compute->Observe(Seconds(end - start));
  dm.batch_rows->Observe(static_cast<double>(rows));
  if (status.ok()) dm.sampled_rows->Increment(static_cast<double>(rows));
  for (Job* job : jobs) {
    if (status.ok()) {
      metrics_->RecordQueue(Seconds(start - job->accepted));
      // num_positive / num_negative: INT32 [B], little-endian as this host. They are the
      // positives and negatives only without classes (with three or more classes they are
      // zeros), so class requests are not counted as short rows or positive fractions.
      if (job->spec.classes.empty()) {
        metrics_->RecordRowQuality(
            reinterpret_cast<const int32_t*>(job->response->num_positive().data().data()),
            reinterpret_cast<const int32_t*>(job->response->num_negative().data().data()),
            job->num_rows(), job->spec.num_samples);
      }
      v1::ServerTiming* t = job->response->mutable_timing();
      t->set_queue_us(Micros(start - job->accepted));
      t->set_compute_us(Micros(end - start));
      t->set_batch_rows(rows);
    }
    job->timing.launched = start;
    job->timing.completed = end;
    job->timing.batch_rows = rows;
    job->done(status);
  }
}

void Scheduler::Fatal(const Status& status) {
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;
    failed_ = true;
    left = queue_.TakeAll();
    metrics_->queue_depth().Set(0);
  }
  spdlog::critical("unrecoverable device fault: {}", status.message());
  for (auto& job : left) job->done(Unavailable("device fault: " + status.message()));
  if (on_fatal_) on_fatal_(status);
}

}  // namespace gpusampler::server
