//! The `delayq` command line (being written).

fn main() {
    std::process::exit(2);
}
