//! The `sugarshack` program for the end-to-end tests: the same library function as the real
//! binary, built in this package so the tests run the code of this checkout.

fn main() -> std::process::ExitCode {
    sugarshack::main()
}
