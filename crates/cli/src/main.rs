//! The `sugarshack` binary: everything it does is [`sugarshack::main`].

fn main() -> std::process::ExitCode {
    sugarshack::main()
}
