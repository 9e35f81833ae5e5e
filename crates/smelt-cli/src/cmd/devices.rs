//! `smelt devices`: every GPU adapter wgpu sees, with what the kernels care
//! about. The index is what `--device N` selects.

use smelt::backend::gpu::{AdapterMemory, AdapterReport, adapters, best_hardware_of};

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let list: Vec<AdapterReport> = adapters().into_iter().map(|(r, _)| r).collect();
    if args.json {
        let items: Vec<String> = list.iter().map(json).collect();
        println!("[{}]", items.join(",\n "));
        return Ok(());
    }
    if list.is_empty() {
        println!("no GPU adapters (Vulkan, Metal, DX12 or GL); smelt runs on the CPU");
        return Ok(());
    }
    for r in &list {
        print!("{}", text(r));
    }
    match best_hardware_of(&list) {
        Some(r) => println!("--backend auto uses device {} ({})", r.index, r.name),
        None => println!(
            "--backend auto uses the CPU: no hardware GPU (software adapters need --backend gpu or --device N)"
        ),
    }
    Ok(())
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn mib(b: u64) -> String {
    format!("{} MiB", b >> 20)
}

fn text(r: &AdapterReport) -> String {
    format!(
        "[{}] {}\n    type: {}{}   backend: {}   driver: {} {}\n    \
         features: subgroups {} (sizes {}..{}), shader-f16 {}, cooperative matrix {}, \
         timestamp queries {}, mappable primary buffers {}\n    \
         limits: max buffer {}, max storage binding {}, workgroup storage {} KiB, \
         invocations per workgroup {}\n    memory: {}   unified memory: {}\n",
        r.index,
        r.name,
        r.device_type,
        if r.software { " (software)" } else { "" },
        r.backend,
        r.driver,
        r.driver_info,
        yes(r.subgroups),
        r.subgroup_sizes.0,
        r.subgroup_sizes.1,
        yes(r.shader_f16),
        yes(r.cooperative_matrix),
        yes(r.timestamp_queries),
        yes(r.mappable_primary_buffers),
        mib(r.max_buffer_size),
        mib(r.max_storage_buffer_binding_size),
        r.max_compute_workgroup_storage_size / 1024,
        r.max_compute_invocations_per_workgroup,
        memory_text(r.memory.as_ref()),
        yes(r.unified_memory),
    )
}

/// "79.1 GiB (76.2 GiB free, Vulkan heap)", or why there is no figure.
fn memory_text(m: Option<&AdapterMemory>) -> String {
    let gib = |b: u64| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64);
    match m {
        None => "unknown (the API gives no figure; --device-memory sets one)".into(),
        Some(m) => match m.available {
            Some(free) => format!("{} ({} free, {})", gib(m.total), gib(free), m.source),
            None => format!("{} ({})", gib(m.total), m.source),
        },
    }
}

fn esc(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c {
            '"' => "\\\"".chars().collect::<Vec<_>>(),
            '\\' => "\\\\".chars().collect(),
            c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32).chars().collect(),
            c => vec![c],
        })
        .collect()
}

fn json(r: &AdapterReport) -> String {
    format!(
        "{{\"index\":{},\"name\":\"{}\",\"device_type\":\"{}\",\"software\":{},\"backend\":\"{}\",\
         \"driver\":\"{}\",\"driver_info\":\"{}\",\"subgroups\":{},\"subgroup_min_size\":{},\
         \"subgroup_max_size\":{},\"shader_f16\":{},\"cooperative_matrix\":{},\
         \"timestamp_queries\":{},\"mappable_primary_buffers\":{},\"max_buffer_size\":{},\
         \"max_storage_buffer_binding_size\":{},\"max_compute_workgroup_storage_size\":{},\
         \"max_compute_invocations_per_workgroup\":{},\"unified_memory\":{},\
         \"memory_bytes\":{},\"memory_available_bytes\":{}}}",
        r.index,
        esc(&r.name),
        esc(&r.device_type),
        r.software,
        esc(&r.backend),
        esc(&r.driver),
        esc(&r.driver_info),
        r.subgroups,
        r.subgroup_sizes.0,
        r.subgroup_sizes.1,
        r.shader_f16,
        r.cooperative_matrix,
        r.timestamp_queries,
        r.mappable_primary_buffers,
        r.max_buffer_size,
        r.max_storage_buffer_binding_size,
        r.max_compute_workgroup_storage_size,
        r.max_compute_invocations_per_workgroup,
        r.unified_memory,
        json_number(r.memory.map(|m| m.total)),
        json_number(r.memory.and_then(|m| m.available)),
    )
}

fn json_number(v: Option<u64>) -> String {
    v.map_or_else(|| "null".into(), |v| v.to_string())
}
