//! The generated bindings: one private `bindgen!` per world of `agentmesh:plugin@0.1.0`.
//!
//! Exports are async (the host runs every call on wasmtime's async support, so timeouts and
//! outgoing HTTP never block a thread). Imports of `interface host` are synchronous and
//! trappable: a guest that breaks a host bound (an oversized key, too many writes) ends its
//! call. WASI is reused from `wasmtime-wasi` and `wasmtime-wasi-http`, never regenerated; the
//! middleware world reuses the tool world's `host` and `types` bindings.

/// World `tool-plugin`.
pub(crate) mod tool {
    wasmtime::component::bindgen!({
        world: "agentmesh:plugin/tool-plugin",
        path: "../../wit",
        imports: { default: trappable },
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// World `middleware-plugin`.
pub(crate) mod middleware {
    wasmtime::component::bindgen!({
        world: "agentmesh:plugin/middleware-plugin",
        path: "../../wit",
        imports: { default: trappable },
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "agentmesh:plugin/host": super::tool::agentmesh::plugin::host,
            "agentmesh:plugin/types": super::tool::agentmesh::plugin::types,
        },
    });
}

/// World `event-filter-plugin`.
pub(crate) mod event_filter {
    wasmtime::component::bindgen!({
        world: "agentmesh:plugin/event-filter-plugin",
        path: "../../wit",
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "agentmesh:plugin/types": super::tool::agentmesh::plugin::types,
        },
    });
}
