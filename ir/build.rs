fn main() {
    lalrpop::Configuration::new()
        .set_out_dir(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .emit_rerun_directives(true)
        .process_file("src/text/grammar.lalrpop")
        .expect("the HLO grammar must generate");
}
