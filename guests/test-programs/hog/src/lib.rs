//! Test program `hog`: `invoke` allocates 1 MiB blocks, touching each, until memory runs out.
//! The host must stop it at its memory limit.

agentmesh_test_glue::tool_program! {
    fn invoke(_action, _input) {
        let mut blocks: Vec<Vec<u8>> = Vec::new();
        loop {
            blocks.push(vec![0xA5; 1024 * 1024]);
            std::hint::black_box(&blocks);
        }
    }
}
