//! The `sugarshack` binary: everything it does is [`sugarshack::main`].

#[global_allocator]
static ALLOCATOR: sugarshack::MiMalloc = sugarshack::MiMalloc;

fn main() -> std::process::ExitCode {
    sugarshack::main()
}
