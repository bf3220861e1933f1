// The shared library answers to NCCL's soname, so programs linked against NCCL load it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
}
