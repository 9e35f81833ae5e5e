//! How much memory an adapter has: for `smelt devices` and for planning a
//! layer split (`model::plan`).
//!
//! wgpu reports no memory figures, so they come from below it:
//!
//! - Vulkan: the largest device-local heap (`vkGetPhysicalDeviceMemoryProperties`)
//!   and, where the driver has `VK_EXT_memory_budget`, that heap's budget
//!   less this process's use: what other processes leave free now.
//! - An adapter that shares host memory (integrated, software) with no
//!   figure from its API: the host's physical memory (Linux `/proc/meminfo`).
//! - Otherwise (Metal, DX12 discrete): unknown; the plan then needs
//!   `--device-memory` or splits evenly without a fit check.

/// An adapter's memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdapterMemory {
    /// The device's own memory (its largest device-local heap).
    pub total: u64,
    /// What this process may still allocate there now, where the driver
    /// says (`VK_EXT_memory_budget`).
    pub available: Option<u64>,
    pub source: MemorySource,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemorySource {
    /// The Vulkan driver's device-local heap (and budget).
    VulkanHeap,
    /// The host's physical memory, which the adapter shares.
    HostMemory,
}

impl AdapterMemory {
    /// What a plan may use: the budget where known, else the total.
    pub fn usable(&self) -> u64 {
        self.available.unwrap_or(self.total).min(self.total)
    }
}

impl std::fmt::Display for MemorySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemorySource::VulkanHeap => "Vulkan heap",
            MemorySource::HostMemory => "host memory",
        })
    }
}

/// `a`'s memory, or `None` where neither its API nor the host says.
pub fn adapter_memory(a: &wgpu::Adapter, unified: bool) -> Option<AdapterMemory> {
    vulkan_memory(a).or_else(|| {
        unified
            .then(host_memory)
            .flatten()
            .map(|total| AdapterMemory {
                total,
                available: None,
                source: MemorySource::HostMemory,
            })
    })
}

/// The host's physical memory, where the OS says (Linux).
fn host_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(not(any(target_arch = "wasm32", target_vendor = "apple")))]
fn vulkan_memory(a: &wgpu::Adapter) -> Option<AdapterMemory> {
    use ash::vk;
    // SAFETY: the handles are only used for queries while `a` (which owns
    // the instance and physical device) is borrowed; nothing is created or
    // destroyed through them.
    let hal = unsafe { a.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let instance = hal.shared_instance().raw_instance();
    let phd = hal.raw_physical_device();
    // SAFETY: `phd` is a physical device of `instance` (see above).
    let base = unsafe { instance.get_physical_device_memory_properties(phd) };
    let (heap, total) = base
        .memory_heaps_as_slice()
        .iter()
        .enumerate()
        .filter(|(_, h)| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|(i, h)| (i, h.size))
        .max_by_key(|&(_, size)| size)?;
    // SAFETY: as above; the extension list is copied out.
    let api = unsafe { instance.get_physical_device_properties(phd) }.api_version;
    let has_budget = unsafe { instance.enumerate_device_extension_properties(phd) }
        .ok()?
        .iter()
        .any(|e| e.extension_name_as_c_str() == Ok(ash::ext::memory_budget::NAME));
    let available = (has_budget && api >= vk::API_VERSION_1_1).then(|| {
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut props = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: the device supports Vulkan 1.1 and the extension, so the
        // chained budget struct is filled; both live through the call.
        unsafe { instance.get_physical_device_memory_properties2(phd, &mut props) };
        budget.heap_budget[heap].saturating_sub(budget.heap_usage[heap])
    });
    Some(AdapterMemory {
        total,
        available: available.filter(|&b| b > 0),
        source: MemorySource::VulkanHeap,
    })
}

#[cfg(any(target_arch = "wasm32", target_vendor = "apple"))]
fn vulkan_memory(_: &wgpu::Adapter) -> Option<AdapterMemory> {
    None
}
