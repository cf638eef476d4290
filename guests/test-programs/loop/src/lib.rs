//! Test program `loop`: `invoke` never returns. The host must stop it at its timeout.

agentmesh_test_glue::tool_program! {
    fn invoke(_action, _input) {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}
