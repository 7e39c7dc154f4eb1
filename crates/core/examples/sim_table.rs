//! Print the simulation table (`cargo run --release -p tcptune-core --example sim_table`).
fn main() {
    print!("{}", tcptune_core::sim::table::paper_table());
}
