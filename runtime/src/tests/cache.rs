//! The compilation cache: fingerprints that ignore names and metadata but nothing else,
//! explained misses, counters, the recompile warning, the disk cache's damage detection,
//! and bucketing/padding.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use crate::cache::*;
use hlo_ir::{ElemType, Module, Shape, Tensor};

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

fn parse(src: &str) -> Module {
    let (m, diags) = hlo_ir::text::parse(src);
    m.unwrap_or_else(|| panic!("{}", diags.render(src, "test.hlo", false)))
}

fn corpus(name: &str) -> hlo_driver::Checked<Module> {
    let path = shared().join("corpus").join(name);
    let src = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    hlo_driver::parse(&src).unwrap_or_else(|d| panic!("{}", d.render(&src, name, false)))
}

fn fp(m: &Module) -> Fingerprint {
    module_fingerprint(m)
}

/// A fresh directory for one test, under cargo's per-target temp dir.
fn temp_dir(test: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tmp").join("cache-tests").join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

// ---- fingerprints ----

#[test]
fn fnv128_matches_the_reference_vectors() {
    assert_eq!(Fingerprint::of(b"").to_hex(), "6c62272e07bb014262b821756295c58d");
    assert_eq!(Fingerprint::of(b"a").to_hex(), "d228cb696f1a8caf78912b704e4a8964");
    assert_eq!(Fingerprint::of(b"foobar").to_string(), "343e1662793c64bf6f0d3597ba446f18");
}

#[test]
fn renaming_every_instruction_and_computation_keeps_the_fingerprint() {
    let m = corpus("train_mlp_sgd.hlo");
    let before = fp(&m);
    let r = renamed(&m);
    let text = hlo_ir::text::print(&r);
    assert!(!text.contains("Arg_0.1") && text.contains("%renamed."), "every name changed:\n{text}");
    assert_eq!(fp(&r), before, "renamed through the IR");
    // The renamed text, parsed again (names as written, fresh parse).
    assert_eq!(fp(&parse(&text)), before, "renamed text re-parsed");
    // And the original printed and re-parsed.
    assert_eq!(fp(&parse(&hlo_ir::text::print(&m))), before, "print/parse round trip");
}

/// `text` without `, metadata={...}` attributes (quotes respected) and without the
/// stack-frame tables between the `HloModule` line and the first computation.
fn strip_debug_info(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(", metadata={") {
        out.push_str(&rest[..at]);
        let body = &rest[at + ", metadata={".len()..];
        let (mut in_str, mut escaped, mut end) = (false, false, None);
        for (i, ch) in body.char_indices() {
            match ch {
                _ if escaped => escaped = false,
                '\\' if in_str => escaped = true,
                '"' => in_str = !in_str,
                '}' if !in_str => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        rest = &body[end.expect("metadata closes") + 1..];
    }
    out.push_str(rest);
    let lines: Vec<&str> = out.lines().collect();
    let Some(tables) = lines.iter().position(|l| *l == "FileNames") else { return out };
    let frames =
        lines.iter().position(|l| *l == "StackFrames").expect("StackFrames follows FileNames");
    let after = frames
        + 1
        + lines[frames + 1..]
            .iter()
            .take_while(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            .count();
    [&lines[..tables], &lines[after..]].concat().join("\n")
}

/// Every computation and instruction renamed through the IR, the module renamed.
fn renamed(m: &Module) -> Module {
    let mut r = m.clone();
    for (k, id) in r.comp_ids().collect::<Vec<_>>().into_iter().enumerate() {
        let c = r.comp_mut(id);
        c.name = format!("renamed_computation_{k}");
        for n in c.post_order() {
            c.rename(n, "renamed");
        }
    }
    r.name = "another_module_name".into();
    r
}

#[test]
fn every_corpus_module_keeps_its_fingerprint_when_renamed_and_differs_from_the_others() {
    let mut by_fp: std::collections::HashMap<Fingerprint, (String, String)> =
        std::collections::HashMap::new();
    let mut n = 0;
    let mut paths: Vec<PathBuf> =
        fs::read_dir(shared().join("corpus")).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    for path in paths {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if !name.ends_with(".hlo") {
            continue;
        }
        let src = fs::read_to_string(&path).unwrap();
        let Ok(m) = hlo_driver::parse(&src) else { continue };
        let f = fp(&m);
        let r = renamed(&m);
        assert_eq!(fp(&r), f, "{name}: renamed through the IR");
        assert_eq!(fp(&parse(&hlo_ir::text::print(&r))), f, "{name}: renamed, printed and parsed");
        // Equal fingerprints only for equal canonical forms (e.g. a debug dump of the same program).
        let canonical = canonical_text(&m);
        if let Some((other, text)) = by_fp.insert(f, (name.clone(), canonical.clone())) {
            assert_eq!(text, canonical, "{name} and {other} share a fingerprint");
        }
        n += 1;
    }
    assert!(n > 100, "only {n} corpus modules");
    println!("{n} corpus modules, {} distinct fingerprints", by_fp.len());
}

#[test]
fn metadata_and_stack_frames_do_not_count() {
    for name in ["train_mlp_sgd", "cond", "conv2d_nhwc"] {
        let src = fs::read_to_string(shared().join(format!("corpus/{name}.debug.hlo"))).unwrap();
        let debug = parse(&src);
        assert!(
            debug.frames.is_some()
                && debug.comps().iter().flat_map(|c| c.instrs()).any(|i| i.metadata.is_some()),
            "{name}"
        );
        // Removed from the text.
        let stripped_text = strip_debug_info(&src);
        assert!(
            !stripped_text.contains("metadata=") && !stripped_text.contains("StackFrames"),
            "{stripped_text}"
        );
        let stripped = parse(&stripped_text);
        assert!(stripped.frames.is_none());
        assert_eq!(fp(&stripped), fp(&debug), "{name}: debug info removed from the text");
        // Removed through the IR.
        let mut m = debug.clone();
        m.frames = None;
        for id in m.comp_ids().collect::<Vec<_>>() {
            let c = m.comp_mut(id);
            for n in c.post_order() {
                c.instr_mut(n).metadata = None;
            }
        }
        assert_eq!(fp(&m), fp(&debug), "{name}: debug info removed through the IR");
        // Metadata edited rather than removed.
        let edited = src.replace("op_name=\"", "op_name=\"renamed/");
        assert_ne!(edited, src);
        assert_eq!(fp(&parse(&edited)), fp(&debug), "{name}: op names edited");
    }
}

const SMALL: &str = r#"HloModule small, entry_computation_layout={(f32[4,8]{1,0}, f32[4,8]{1,0})->f32[4,8]{1,0}}

%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %x_plus_y = f32[] add(%x, %y)
}

ENTRY %main (lhs: f32[4,8], rhs: f32[4,8]) -> f32[4,8] {
  %lhs = f32[4,8]{1,0} parameter(0)
  %rhs = f32[4,8]{1,0} parameter(1)
  %two = f32[] constant(2)
  %zero = f32[] constant(0)
  %two_b = f32[4,8]{1,0} broadcast(%two), dimensions={}
  %diff = f32[4,8]{1,0} subtract(%lhs, %rhs)
  %rowsum = f32[4]{0} reduce(%diff, %zero), dimensions={1}, to_apply=%sum
  %rowsum_b = f32[4,8]{1,0} broadcast(%rowsum), dimensions={0}
  %scaled = f32[4,8]{1,0} multiply(%diff, %two_b)
  ROOT %out = f32[4,8]{1,0} add(%scaled, %rowsum_b)
}
"#;

#[test]
fn names_and_metadata_keep_the_fingerprint_semantics_change_it() {
    let base = fp(&parse(SMALL));
    let same = [
        ("HloModule small", "HloModule other_name"),
        ("%diff", "%a_difference"),
        ("%sum", "%adder"),
        ("%main", "%entry_fn"),
        ("%x_plus_y", "%s.7"),
        ("%lhs", "%p.0"),
        (
            "dimensions={1}, to_apply=%sum",
            "dimensions={1}, to_apply=%sum, metadata={op_name=\"jit(f)/reduce_sum\" source_file=\"f.py\" source_line=3}",
        ),
    ];
    for (from, to) in same {
        let text = SMALL.replace(from, to);
        assert_ne!(text, SMALL);
        assert_eq!(fp(&parse(&text)), base, "`{from}` -> `{to}` must keep the fingerprint");
    }
    let different = [
        ("constant(2)", "constant(3)"),
        ("subtract(%lhs, %rhs)", "subtract(%rhs, %lhs)"),
        ("multiply(%diff, %two_b)", "divide(%diff, %two_b)"),
        ("%scaled = f32[4,8]{1,0}", "%scaled = f32[4,8]{0,1}"),
        ("dimensions={1}, to_apply", "dimensions={0}, to_apply"),
        ("ROOT %x_plus_y = f32[] add(%x, %y)", "ROOT %x_plus_y = f32[] maximum(%x, %y)"),
        (
            "%rowsum_b = f32[4,8]{1,0} broadcast(%rowsum), dimensions={0}",
            "%rowsum_b = f32[4,8]{1,0} broadcast(%rowsum), dimensions={0}, control-predecessors={%scaled}",
        ),
        (
            "entry_computation_layout={(f32[4,8]{1,0}, ",
            "entry_computation_layout={(f32[4,8]{0,1}, ",
        ),
        ("HloModule small,", "HloModule small, input_output_alias={ {}: (0, {}, may-alias) },"),
        (
            "%diff = f32[4,8]{1,0} subtract(%lhs, %rhs)",
            "%diff = f32[4,8]{1,0} subtract(%lhs, %rhs), sharding={replicated}",
        ),
    ];
    let mut seen = std::collections::HashSet::from([base]);
    for (from, to) in different {
        let text = SMALL.replace(from, to);
        assert_ne!(text, SMALL, "`{from}` not found");
        let f = fp(&parse(&text));
        assert!(seen.insert(f), "`{from}` -> `{to}` must change the fingerprint");
    }
}

#[test]
fn a_corpus_constant_or_shape_change_changes_the_fingerprint() {
    let src = fs::read_to_string(shared().join("corpus/train_mlp_sgd.hlo")).unwrap();
    let base = fp(&parse(&src));
    let constant = src.replacen("constant(0)", "constant(0.5)", 1);
    let shape = src.replacen("f32[32,128]{1,0} parameter(0)", "f32[32,128]{0,1} parameter(0)", 1);
    for changed in [constant, shape] {
        assert_ne!(changed, src);
        assert_ne!(fp(&parse(&changed)), base);
    }
}

// ---- keys ----

fn f32s(dims: &[u64]) -> Shape {
    Shape::array(ElemType::F32, dims)
}

#[test]
fn key_encoding_is_stable_and_layout_normalized() {
    let key = CacheKey::new(
        Fingerprint(1),
        vec![f32s(&[8, 128]), Shape::scalar(ElemType::S32)],
        Fingerprint(2),
    );
    let mut want = vec![1u8];
    want.extend_from_slice(&1u128.to_le_bytes());
    want.extend_from_slice(&2u128.to_le_bytes());
    want.extend_from_slice(&2u32.to_le_bytes());
    for s in ["f32[8,128]{1,0}", "s32[]"] {
        want.extend_from_slice(&(s.len() as u32).to_le_bytes());
        want.extend_from_slice(s.as_bytes());
    }
    assert_eq!(key.to_bytes(), want);
    assert_eq!(key.hex_name(), Fingerprint::of(&want).to_hex());
    assert_eq!(key.hex_name().len(), 32);
    assert_eq!(
        key.to_string(),
        "module 00000000000000000000000000000001 args (f32[8,128]{1,0}, s32[]) options 00000000000000000000000000000002"
    );
    // A tensor's shape (no layout) and the written default layout are one key.
    let t = Tensor::zeros(ElemType::F32, &[8, 128]).unwrap();
    let from_tensors =
        CacheKey::for_tensors(Fingerprint(1), &[t, Tensor::scalar(0i32)], Fingerprint(2));
    assert_eq!(from_tensors, key);
    let transposed = CacheKey::new(
        Fingerprint(1),
        vec![Shape::Array(hlo_ir::ArrayShape {
            layout: Some(Box::new(hlo_ir::Layout { minor_to_major: vec![0, 1], ext: None })),
            ..f32s(&[8, 128]).as_array().unwrap().clone()
        })],
        Fingerprint(2),
    );
    assert_ne!(transposed.args, key.args[..1]);
}

// ---- the in-memory cache ----

/// The corpus MLP's entry parameters with the batch (the data and labels) set to `batch`.
fn mlp_args(m: &Module, batch: u64) -> Vec<Shape> {
    let mut args = m.entry_param_shapes();
    assert_eq!(args[4].to_string(), "f32[32,64]{1,0}");
    assert_eq!(args[5].to_string(), "s32[32]{0}");
    args[4] = f32s(&[batch, 64]);
    args[5] = Shape::array(ElemType::S32, &[batch]);
    args
}

#[test]
fn a_new_batch_size_misses_with_an_explanation() {
    let m = corpus("train_mlp_sgd.hlo");
    let (module, options) = (fp(&m), Fingerprint::of(b"opt-level=2"));
    let cache = CompileCache::<String>::new();
    let compile = |what: &str| {
        let what = what.to_string();
        move || -> Result<String, String> { Ok(what) }
    };

    let key32 = CacheKey::new(module, mlp_args(&m, 32), options);
    let (v, o) = cache.get_or_compile_named("train_mlp_sgd", &key32, compile("b32")).unwrap();
    assert_eq!(*v, "b32");
    assert_eq!(o.miss().unwrap().explanation(), "first compile of this program");

    let (v, o) = cache.get_or_compile(&key32, compile("unused")).unwrap();
    assert_eq!((v.as_str(), o), ("b32", Outcome::Hit));

    let key16 = CacheKey::new(module, mlp_args(&m, 16), options);
    let (v, o) = cache.get_or_compile(&key16, compile("b16")).unwrap();
    assert_eq!(*v, "b16");
    let miss = o.miss().unwrap();
    assert_eq!(
        miss.explanation(),
        "param 4: f32[16,64] now, f32[32,64] before\nparam 5: s32[16] now, s32[32] before"
    );
    let shown = miss.to_string();
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 3, "{shown}");
    assert!(lines[2].starts_with("compile time: ") && lines[2].ends_with(" ms"), "{shown}");
    assert_eq!(miss.warning, None);

    // Nearest entry: batch 17 differs from both in two params; the latest (16) is named.
    let (_, o) = cache
        .get_or_compile(&CacheKey::new(module, mlp_args(&m, 17), options), compile("b17"))
        .unwrap();
    assert_eq!(
        o.miss().unwrap().explanation(),
        "param 4: f32[17,64] now, f32[16,64] before\nparam 5: s32[17] now, s32[16] before"
    );

    // Same shapes, other options.
    let (_, o) = cache
        .get_or_compile(
            &CacheKey::new(module, mlp_args(&m, 32), Fingerprint::of(b"opt-level=0")),
            compile("o0"),
        )
        .unwrap();
    assert_eq!(o.miss().unwrap().explanation(), "compile options changed");

    // The program's module changed (a constant): explained against its last compile.
    let src = fs::read_to_string(shared().join("corpus/train_mlp_sgd.hlo")).unwrap();
    let edited = fp(&parse(&src.replacen("constant(0)", "constant(0.5)", 1)));
    let key = CacheKey::new(edited, mlp_args(&m, 8), options);
    let (_, o) = cache.get_or_compile_named("train_mlp_sgd", &key, compile("edited")).unwrap();
    assert_eq!(
        o.miss().unwrap().explanation(),
        "module changed\nparam 4: f32[8,64] now, f32[32,64] before\nparam 5: s32[8] now, s32[32] before"
    );
    // Without a program name, another module is a first compile.
    let key = CacheKey::new(edited, mlp_args(&m, 4), Fingerprint(7));
    let (_, o) = cache.get_or_compile_named("something_else", &key, compile("x")).unwrap();
    assert_eq!(
        o.miss().unwrap().explanation(),
        "compile options changed\nparam 4: f32[4,64] now, f32[8,64] before\nparam 5: s32[4] now, s32[8] before"
    );
    let (_, o) = cache
        .get_or_compile(&CacheKey::new(Fingerprint(99), vec![], options), compile("x"))
        .unwrap();
    assert_eq!(o.miss().unwrap().explanation(), "first compile of this program");

    // A parameter count mismatch and a layout-only difference.
    let (_, o) = cache
        .get_or_compile(&CacheKey::new(Fingerprint(99), vec![f32s(&[2, 2])], options), compile("x"))
        .unwrap();
    assert_eq!(o.miss().unwrap().explanation(), "1 params now, 0 before");
    let col_major = Shape::Array(hlo_ir::ArrayShape {
        layout: Some(Box::new(hlo_ir::Layout { minor_to_major: vec![0, 1], ext: None })),
        ..f32s(&[2, 2]).as_array().unwrap().clone()
    });
    let (_, o) = cache
        .get_or_compile(&CacheKey::new(Fingerprint(99), vec![col_major], options), compile("x"))
        .unwrap();
    assert_eq!(o.miss().unwrap().explanation(), "param 0: f32[2,2]{0,1} now, f32[2,2]{1,0} before");
}

#[test]
fn counters_count_hits_misses_compiles_and_time() {
    let cache = CompileCache::<u64>::new();
    let key = |n: u64| CacheKey::new(Fingerprint(1), vec![f32s(&[n])], Fingerprint(0));
    let slow = |v: u64| {
        move || -> Result<u64, String> {
            std::thread::sleep(Duration::from_millis(3));
            Ok(v)
        }
    };
    cache.get_or_compile(&key(1), slow(1)).unwrap();
    cache.get_or_compile(&key(1), slow(9)).unwrap();
    cache.get_or_compile(&key(1), slow(9)).unwrap();
    cache.get_or_compile(&key(2), slow(2)).unwrap();
    let e = cache
        .get_or_compile(&key(3), || Err::<u64, _>("no kernel for f32[3]".to_string()))
        .unwrap_err();
    assert_eq!(e, "no kernel for f32[3]");
    // A failed compile caches nothing: the next lookup compiles again.
    let (v, o) = cache.get_or_compile(&key(3), slow(3)).unwrap();
    assert_eq!(*v, 3);
    assert!(!o.is_hit());
    let s = cache.stats();
    assert_eq!((s.hits, s.waits, s.misses, s.compiles), (2, 0, 4, 3), "{s:?}");
    assert!(s.compile_time >= Duration::from_millis(9), "{s:?}");
    assert_eq!(cache.len(), 3);
    assert_eq!(cache.get(&key(2)).as_deref(), Some(&2));
    assert_eq!(cache.distinct_arg_sets(Fingerprint(1)), 3);
}

#[test]
fn recompiling_for_many_shapes_warns() {
    let m = corpus("train_mlp_sgd.hlo");
    let module = fp(&m);
    let cache = CompileCache::<u64>::new();
    let mut warnings = Vec::new();
    for batch in 1..=10u64 {
        let key = CacheKey::new(module, mlp_args(&m, batch), Fingerprint(0));
        let (_, o) = cache.get_or_compile(&key, || Ok::<_, ()>(batch)).unwrap();
        warnings.push(o.miss().unwrap().warning.clone());
        // Hits never warn.
        assert!(cache.get_or_compile(&key, || Ok::<_, ()>(0)).unwrap().1.is_hit());
    }
    assert!(warnings[..8].iter().all(Option::is_none), "{warnings:?}");
    let ninth = warnings[8].as_ref().expect("the 9th shape set warns");
    assert_eq!(
        ninth.to_string(),
        "recompiled for 9 distinct argument shapes: consider padding to buckets (see `bucket`)"
    );
    assert_eq!(ninth.distinct, 9);
    assert_eq!(warnings[9].as_ref().map(|w| w.distinct), Some(10));
    // Other options do not add shape sets; the limit is configurable.
    let key = CacheKey::new(module, mlp_args(&m, 1), Fingerprint(5));
    let (_, o) = cache.get_or_compile(&key, || Ok::<_, ()>(0)).unwrap();
    assert_eq!(o.miss().unwrap().warning, None);
    let small = CompileCache::<u64>::with_recompile_limit(1);
    small
        .get_or_compile(&CacheKey::new(module, mlp_args(&m, 1), Fingerprint(0)), || Ok::<_, ()>(1))
        .unwrap();
    let (_, o) = small
        .get_or_compile(&CacheKey::new(module, mlp_args(&m, 2), Fingerprint(0)), || Ok::<_, ()>(2))
        .unwrap();
    let miss = o.miss().unwrap();
    assert!(miss.to_string().ends_with("\nwarning: recompiled for 2 distinct argument shapes: consider padding to buckets (see `bucket`)"), "{miss}");
}

#[test]
fn concurrent_lookups_of_one_key_compile_once() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompileCache<Vec<u8>>>();
    let cache = Arc::new(CompileCache::<u64>::new());
    let key = CacheKey::new(Fingerprint(3), vec![f32s(&[4])], Fingerprint(0));
    let threads = 6;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (cache, key, barrier) = (cache.clone(), key.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let (v, _) = cache
                    .get_or_compile(&key, || {
                        std::thread::sleep(Duration::from_millis(50));
                        Ok::<_, ()>(42)
                    })
                    .unwrap();
                *v
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 42);
    }
    let s = cache.stats();
    assert_eq!((s.misses, s.compiles, s.hits), (1, 1, threads as u64 - 1), "{s:?}");

    // A panicking compile releases its key: the next caller compiles instead of waiting forever.
    let other = CacheKey::new(Fingerprint(4), vec![], Fingerprint(0));
    let c = cache.clone();
    let k = other.clone();
    let panicked = std::thread::spawn(move || {
        c.get_or_compile(&k, || -> Result<u64, ()> { panic!("compiler bug") })
    })
    .join();
    assert!(panicked.is_err());
    let (v, o) = cache.get_or_compile(&other, || Ok::<_, ()>(7)).unwrap();
    assert_eq!((*v, o.is_hit()), (7, false));
}

// ---- the disk cache ----

fn disk_key(n: u64) -> CacheKey {
    CacheKey::new(
        Fingerprint::of(b"module"),
        vec![f32s(&[n, 128])],
        Fingerprint::of(b"cranelift speed"),
    )
}

#[test]
fn disk_entries_survive_a_restart() {
    let dir = temp_dir("restart");
    let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
    {
        let disk = DiskCache::new(dir.join("nested/cache"));
        assert_eq!(disk.load(&disk_key(8)).unwrap(), None, "missing directory: no entry");
        disk.store(&disk_key(8), &payload).unwrap();
        disk.store(&disk_key(16), b"").unwrap();
    }
    let disk = DiskCache::new(dir.join("nested/cache"));
    assert_eq!(disk.load(&disk_key(8)).unwrap().as_deref(), Some(&payload[..]));
    assert_eq!(disk.load(&disk_key(16)).unwrap().as_deref(), Some(&b""[..]));
    assert_eq!(disk.load(&disk_key(32)).unwrap(), None);
    let path = disk.path_of(&disk_key(8));
    assert_eq!(
        path.file_name().unwrap().to_str().unwrap(),
        format!("{}.hlocache", disk_key(8).hex_name())
    );
    // Overwrite, remove.
    disk.store(&disk_key(8), b"v2").unwrap();
    assert_eq!(disk.load(&disk_key(8)).unwrap().as_deref(), Some(&b"v2"[..]));
    assert!(disk.remove(&disk_key(8)).unwrap());
    assert!(!disk.remove(&disk_key(8)).unwrap());
    assert_eq!(disk.load(&disk_key(8)).unwrap(), None);
}

fn corrupt_why(disk: &DiskCache, key: &CacheKey) -> String {
    match disk.load(key) {
        Err(DiskCacheError::Corrupt { path, why }) => {
            assert_eq!(path, disk.path_of(key));
            why
        }
        other => panic!("expected a corrupt entry, got {other:?}"),
    }
}

#[test]
fn damaged_disk_entries_are_reported_never_trusted() {
    let dir = temp_dir("damaged");
    let disk = DiskCache::new(&dir);
    let key = disk_key(8);
    let payload = b"machine code and relocations".to_vec();
    disk.store(&key, &payload).unwrap();
    let path = disk.path_of(&key);
    let good = fs::read(&path).unwrap();

    // Every truncation.
    for len in 0..good.len() {
        fs::write(&path, &good[..len]).unwrap();
        let why = corrupt_why(&disk, &key);
        assert!(
            why.contains("truncated")
                || why.contains("shorter than")
                || why.contains("magic")
                || why.contains("version"),
            "{len}: {why}"
        );
    }
    // Trailing bytes.
    fs::write(&path, [&good[..], b"x"].concat()).unwrap();
    assert!(corrupt_why(&disk, &key).starts_with("trailing bytes"));
    // Every single-bit flip.
    for bit in 0..good.len() * 8 {
        let mut bad = good.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        fs::write(&path, &bad).unwrap();
        corrupt_why(&disk, &key);
    }
    // Garbage of many lengths, and garbage behind a valid magic.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for len in [1usize, 7, 16, 17, 40, 64, 100, 1000] {
        for with_magic in [false, true] {
            let mut junk: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if with_magic && len >= 12 {
                junk[..8].copy_from_slice(b"HLOCACHE");
                junk[8..12].copy_from_slice(&1u32.to_le_bytes());
            }
            fs::write(&path, &junk).unwrap();
            corrupt_why(&disk, &key);
        }
    }
    // Another version of the format.
    let mut v2 = good.clone();
    v2[8] = 2;
    fs::write(&path, &v2).unwrap();
    assert_eq!(corrupt_why(&disk, &key), "format version 2, expected 1");

    // A well-formed entry of another key under this key's name.
    let other = disk_key(16);
    disk.store(&other, &payload).unwrap();
    fs::copy(disk.path_of(&other), &path).unwrap();
    let why = corrupt_why(&disk, &key);
    assert!(why.contains("another key"), "{why}");
    let e = disk.load(&key).unwrap_err();
    assert!(
        e.is_corrupt()
            && e.to_string().starts_with(&format!("{}: corrupt cache entry: ", path.display())),
        "{e}"
    );

    // The caller's recovery: recompile and store over it.
    disk.store(&key, &payload).unwrap();
    assert_eq!(disk.load(&key).unwrap(), Some(payload));
}

#[test]
fn atomic_stores_leave_no_temporary_files() {
    let dir = temp_dir("atomic");
    let disk = DiskCache::new(&dir);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let disk = disk.clone();
            std::thread::spawn(move || {
                for i in 0..25u64 {
                    let payload = vec![(t * 31 + i) as u8; 1000 + i as usize];
                    disk.store(&disk_key(i % 5), &payload).unwrap();
                    // Concurrent writers of a key: a reader sees one whole entry or another.
                    let got = disk.load(&disk_key(i % 5)).unwrap().unwrap();
                    assert!(got.len() >= 1000 && got.iter().all(|&b| b == got[0]));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut want: Vec<String> =
        (0..5).map(|i| format!("{}.hlocache", disk_key(i).hex_name())).collect();
    want.sort();
    assert_eq!(names, want);
}

// ---- buckets and padding ----

#[test]
fn bucket_picks_the_smallest_that_fits() {
    let buckets = [64, 8, 16, 32];
    assert_eq!(bucket(0, &buckets), Some(8));
    assert_eq!(bucket(8, &buckets), Some(8));
    assert_eq!(bucket(9, &buckets), Some(16));
    assert_eq!(bucket(33, &buckets), Some(64));
    assert_eq!(bucket(65, &buckets), None);
    assert_eq!(bucket(1, &[]), None);
}

#[test]
fn pad_dim_pads_with_zeros_and_masks_the_padding() {
    let t = Tensor::from_f32(&[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
    let (rows, mask) = pad_dim(&t, 0, 4).unwrap();
    assert_eq!(rows.dims(), &[4, 3]);
    assert_eq!(rows.to_vec::<f32>().unwrap(), [1., 2., 3., 4., 5., 6., 0., 0., 0., 0., 0., 0.]);
    assert_eq!(mask.elem(), ElemType::Pred);
    assert_eq!(mask.dims(), &[4]);
    assert_eq!(mask.to_vec::<bool>().unwrap(), [true, true, false, false]);

    let (cols, mask) = pad_dim(&t, 1, 5).unwrap();
    assert_eq!(cols.to_vec::<f32>().unwrap(), [1., 2., 3., 0., 0., 4., 5., 6., 0., 0.]);
    assert_eq!(mask.to_vec::<bool>().unwrap(), [true, true, true, false, false]);

    let labels = Tensor::from_i32(&[3], &[7, 8, 9]).unwrap();
    let (p, _) = pad_dim(&labels, 0, bucket(3, &[4, 8]).unwrap() as u64).unwrap();
    assert_eq!(p.to_vec::<i32>().unwrap(), [7, 8, 9, 0]);
    let (same, mask) = pad_dim(&labels, 0, 3).unwrap();
    assert_eq!((same, mask.to_vec::<bool>().unwrap()), (labels.clone(), vec![true; 3]));
    let empty = Tensor::zeros(ElemType::F32, &[0, 2]).unwrap();
    let (p, mask) = pad_dim(&empty, 0, 2).unwrap();
    assert_eq!((p.dims(), p.to_vec::<f32>().unwrap()), (&[2, 2][..], vec![0.0; 4]));
    assert_eq!(mask.to_vec::<bool>().unwrap(), [false, false]);

    assert_eq!(pad_dim(&labels, 1, 4).unwrap_err(), PadError::NoSuchDim { dim: 1, rank: 1 });
    assert_eq!(pad_dim(&labels, 0, 2).unwrap_err(), PadError::Shrink { dim: 0, size: 3, to: 2 });
    assert!(matches!(pad_dim(&t, 1, u64::MAX).unwrap_err(), PadError::Tensor(_)));
}
