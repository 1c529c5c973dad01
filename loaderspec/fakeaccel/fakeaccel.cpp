// fakeaccel: a PrivateUse1 "accelerator" whose only real feature is host (pinned) memory.
//
// Why: without a GPU, torch's pinning path (Tensor.pin_memory / is_pinned, the DataLoader's
// pin-memory thread) is never exercised; mocking it in Python would test our mock, not torch.
// This library plugs into the same C++ hooks a real backend uses, so pin_memory() runs
// at::_pin_memory -> Context::getPinnedMemoryAllocator -> PrivateUse1 hooks -> this allocator,
// and is_pinned() runs Context::isPinnedPtr -> PrivateUse1 hooks -> this registry.
//
// "Pinned" memory is plain 64-byte-aligned malloc memory recorded in a registry, so is_pinned()
// is true exactly for storages this allocator made. There is no device memory and no kernels:
// moving a tensor to the device is not supported.
//
// Everything registers itself from static initialisers when the library is loaded
// (torch.ops.load_library); loaderspec/fakeaccel/__init__.py names the backend first.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace fakeaccel {

// ---- the pinned-pointer registry ---------------------------------------------------------

struct Registry {
  std::mutex mutex;
  std::map<std::uintptr_t, std::size_t> blocks;  // start -> size, of live allocations
  std::int64_t allocations = 0;                   // ever made (for tests)
};

// Never destroyed: a pinned tensor may be freed during static destruction at exit.
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

void free_pinned(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().blocks.erase(reinterpret_cast<std::uintptr_t>(ptr));
  }
  std::free(ptr);
}

// True when ptr lies inside a live allocation (as CUDA answers for any address in a pinned
// block, not only its start).
bool is_pinned(const void* ptr) {
  if (ptr == nullptr) {
    return false;
  }
  auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(registry().mutex);
  auto& blocks = registry().blocks;
  auto it = blocks.upper_bound(addr);
  if (it == blocks.begin()) {
    return false;
  }
  --it;
  return addr < it->first + it->second;
}

// ---- the host allocator ------------------------------------------------------------------

struct HostAllocator final : at::HostAllocator {
  at::DataPtr allocate(std::size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) {
      // 64-byte alignment, as torch's CPU allocator gives.
      TORCH_CHECK(
          posix_memalign(&ptr, 64, nbytes) == 0 && ptr != nullptr,
          "fakeaccel: failed to allocate ",
          nbytes,
          " bytes of pinned host memory");
      std::lock_guard<std::mutex> lock(registry().mutex);
      registry().blocks.emplace(reinterpret_cast<std::uintptr_t>(ptr), nbytes);
      ++registry().allocations;
    }
    return {ptr, ptr, &free_pinned, at::Device(at::kCPU)};
  }

  at::DeleterFnPtr raw_deleter() const override {
    return &free_pinned;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // No streams to synchronise with: memory is reusable as soon as it is freed.
  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override {
    return true;
  }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    return at::HostStats();
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

HostAllocator host_allocator;

// ---- device bookkeeping: one device, index 0 ---------------------------------------------

thread_local c10::DeviceIndex current_device = 0;

c10::DeviceIndex checked(c10::DeviceIndex index) {
  TORCH_CHECK(index == 0 || index == -1, "fakeaccel has one device (0), not ", index);
  return 0;
}

struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override {
    return static_type;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = current_device;
    current_device = checked(d.index());
    return c10::Device(static_type, old);
  }
  c10::Device getDevice() const override {
    return c10::Device(static_type, current_device);
  }
  void setDevice(c10::Device d) const override {
    current_device = checked(d.index());
  }
  void uncheckedSetDevice(c10::Device /*d*/) const noexcept override {
    current_device = 0;
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(static_type, checked(d.index())));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return 1;
  }
};

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return true;
  }
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override {
    return true;
  }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override {
    return 1;
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    current_device = checked(device);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_device;
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = current_device;
    current_device = checked(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  bool isPinnedPtr(const void* data) const override {
    return is_pinned(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return at::getHostAllocator(at::kPrivateUse1);
  }
  at::Device getDeviceFromPtr(void* /*data*/) const override {
    TORCH_CHECK(false, "fakeaccel has no device memory");
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex /*device_index*/) const override {
    // Nothing runs on the device; the CPU generator keeps seeding code working.
    return at::detail::getDefaultCPUGenerator();
  }
};

// Registration, when the library is loaded.
C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl)
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &host_allocator)

struct RegisterHooks {
  RegisterHooks() {
    static Hooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
};
RegisterHooks register_hooks;

}  // namespace fakeaccel

// For tests and diagnostics, through ctypes: live pinned blocks and allocations ever made.
extern "C" {
std::int64_t fakeaccel_live_blocks() {
  std::lock_guard<std::mutex> lock(fakeaccel::registry().mutex);
  return static_cast<std::int64_t>(fakeaccel::registry().blocks.size());
}
std::int64_t fakeaccel_allocations() {
  std::lock_guard<std::mutex> lock(fakeaccel::registry().mutex);
  return fakeaccel::registry().allocations;
}
}
