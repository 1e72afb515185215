//! Writes ferry's CustomResourceDefinitions: `crdgen --out deploy/crds` writes one file per CRD,
//! `crdgen` alone prints them all as one YAML stream.

use std::{path::PathBuf, process::ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [] => ferry_crds::manifest::render().map(|docs| {
            let texts: Vec<_> = docs.into_iter().map(|(_, text)| text).collect();
            print!("{}", texts.join("---\n"));
        }),
        [flag, dir] if flag == "--out" => {
            ferry_crds::manifest::write_all(&PathBuf::from(dir)).map(|paths| {
                for p in paths {
                    eprintln!("wrote {}", p.display());
                }
            })
        }
        _ => {
            eprintln!("usage: crdgen [--out DIR]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crdgen: {e}");
            ExitCode::FAILURE
        }
    }
}
