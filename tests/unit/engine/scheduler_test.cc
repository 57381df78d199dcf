// The scheduler's capacity accounting with its policy swapped: FCFS preempts the youngest running
// sequence and requeues it ahead of younger waiting ones; another policy's choices are obeyed
// without touching the scheduler; an unknown policy name is a typed error naming the setting.
#include <doctest/doctest.h>

#include <deque>
#include <memory>
#include <vector>

#include "engine/scheduler.h"
#include "engine/scheduling_policy.h"

using namespace tandem;

namespace {

// A sequence whose whole prompt of `len` tokens is computed: it wants one decode token next.
std::unique_ptr<Sequence> decoding(int64_t order, int32_t len) {
  auto s = std::make_unique<Sequence>();
  s->id = uint64_t(order);
  s->arrival_order = order;
  s->tokens.assign(size_t(len) + 1, 7);  // prompt + one sampled token
  s->prompt_len = len;
  return s;
}

// Serves the youngest first and preempts the oldest: the opposite of FCFS on both choices.
class YoungestFirst final : public SchedulingPolicy {
 public:
  std::string_view name() const override { return "youngest-first"; }
  bool before(const Sequence& a, const Sequence& b) const override {
    return a.arrival_order > b.arrival_order;
  }
  size_t pick_victim(std::span<Sequence* const> candidates, const Sequence&) const override {
    size_t oldest = 0;
    for (size_t i = 1; i < candidates.size(); ++i) {
      if (candidates[i]->arrival_order < candidates[oldest]->arrival_order) oldest = i;
    }
    return oldest;
  }
};

struct Fixture {
  // Pages of 4 tokens; three running sequences of 8 computed tokens (2 pages each, 6 in all)
  // whose next token needs a third page each: only one more page is free.
  PagePool pool{7};
  std::vector<std::unique_ptr<Sequence>> owned;
  std::vector<Sequence*> running;
  std::deque<Sequence*> waiting;

  Fixture() {
    for (int64_t order = 0; order < 3; ++order) {
      owned.push_back(decoding(order, 8));
      Sequence* s = owned.back().get();
      REQUIRE(s->pages.reserve(pool, 8, 4));
      s->num_computed = 8;
      running.push_back(s);
    }
    owned.push_back(decoding(5, 8));  // waiting, younger than all running, too big to fit
    waiting.push_back(owned.back().get());
  }
};

std::vector<int64_t> orders(const auto& seqs) {
  std::vector<int64_t> out;
  for (const Sequence* s : seqs) out.push_back(s->arrival_order);
  return out;
}

}  // namespace

TEST_CASE("fcfs: the oldest runs first, the youngest running sequence is the victim") {
  Fixture f;
  Scheduler sched(SchedulerConfig{8, 64, 16, 4});
  CHECK(sched.policy().name() == "fcfs");
  SchedulePlan plan = sched.schedule(f.waiting, f.running, f.pool);
  // Sequence 0 takes the free page; 1 needs one, so 2 (the youngest) gives up its pages.
  REQUIRE(plan.batch.size() == 2);
  CHECK(plan.batch[0].seq->arrival_order == 0);
  CHECK(plan.batch[1].seq->arrival_order == 1);
  CHECK(orders(plan.preempted) == std::vector<int64_t>{2});
  CHECK(plan.preempted[0]->num_computed == 0);
  CHECK(plan.preempted[0]->pages.pages.empty());
  CHECK(orders(f.running) == std::vector<int64_t>{0, 1});
  // Requeued ahead of the younger waiting sequence: it resumes first.
  CHECK(orders(f.waiting) == std::vector<int64_t>{2, 5});
  CHECK(f.pool.free_pages() == 1);
}

TEST_CASE("another policy's service order and victim are obeyed") {
  Fixture f;
  Scheduler sched(SchedulerConfig{8, 64, 16, 4}, &Sequence::pages,
                  std::make_shared<const YoungestFirst>());
  SchedulePlan plan = sched.schedule(f.waiting, f.running, f.pool);
  // Served youngest first: 2 takes the free page; 1 needs one and the oldest (0) is the victim.
  REQUIRE(plan.batch.size() == 2);
  CHECK(plan.batch[0].seq->arrival_order == 2);
  CHECK(plan.batch[1].seq->arrival_order == 1);
  CHECK(orders(plan.preempted) == std::vector<int64_t>{0});
  CHECK(orders(f.running) == std::vector<int64_t>{2, 1});
  // The waiting queue is in the policy's order too: the younger 5 stays ahead of 0.
  CHECK(orders(f.waiting) == std::vector<int64_t>{5, 0});
  auto newest = decoding(9, 3);
  sched.enqueue(f.waiting, newest.get());
  CHECK(orders(f.waiting) == std::vector<int64_t>{9, 5, 0});
}

TEST_CASE("the token budget caps each step; admission never skips the head of the queue") {
  PagePool pool(64);
  std::vector<std::unique_ptr<Sequence>> owned;
  std::deque<Sequence*> waiting;
  std::vector<Sequence*> running;
  Scheduler sched(SchedulerConfig{8, 20, 16, 4});
  for (int64_t order : {0, 1, 2}) {
    auto s = std::make_unique<Sequence>();
    s->arrival_order = order;
    s->tokens.assign(order == 1 ? 100 : 4, 7);  // a long prompt between two short ones
    s->prompt_len = int32_t(s->tokens.size());
    sched.enqueue(waiting, s.get());
    owned.push_back(std::move(s));
  }
  SchedulePlan plan = sched.schedule(waiting, running, pool);
  // 4 tokens of the first, then a 16-token chunk of the second fills the budget of 20; the
  // short third prompt is not let past the long one.
  REQUIRE(plan.batch.size() == 2);
  CHECK(plan.batch[0].num_tokens == 4);
  CHECK(plan.batch[1].num_tokens == 16);
  CHECK(orders(waiting) == std::vector<int64_t>{2});
}

TEST_CASE("an unknown policy name is a typed error naming the setting") {
  auto fcfs = make_scheduling_policy("fcfs");
  REQUIRE(fcfs.ok());
  CHECK((*fcfs)->name() == "fcfs");
  auto bad = make_scheduling_policy("lottery");
  REQUIRE(!bad.ok());
  CHECK(bad.error().code == ErrorCode::kInvalidArgument);
  CHECK(bad.error().message.find("scheduling_policy") != std::string::npos);
  CHECK(bad.error().message.find("lottery") != std::string::npos);
}
