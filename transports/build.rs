//! Compiles the variadic logger that net plugins are handed (src/net/plugin/logger.c):
//! stable Rust cannot define a C-variadic function.

fn main() {
    println!("cargo:rerun-if-changed=src/net/plugin/logger.c");
    cc::Build::new().file("src/net/plugin/logger.c").warnings(true).compile("oxccl_net_plugin_logger");
}
