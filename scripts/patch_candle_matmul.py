"""Rewrites the gemm call of candle-core's CPU matmul (src/cpu_backend/mod.rs):

- the output is allocated without zeroing: gemm is called with read_dst = false and writes
  every element (k = 0 keeps the zeroed buffer), so the serial memset on the calling thread
  before each product is gone;
- a batch of at least as many products as threads (attention's per-head matmuls:
  batch x heads of them) runs one product per rayon task with a sequential gemm each,
  instead of every small product waking and joining all threads in turn.
Run from the repository root: python3 scripts/patch_candle_matmul.py vendor/candle-core/src/cpu_backend/mod.rs"""
import sys

p = sys.argv[1]
s = open(p).read()
old_start = "        let mut dst = vec![T::zero(); b * m * n];\n        let num_threads = crate::utils::get_num_threads();"
old_loop_start = "        for step in 0..b {\n            let lhs_p = &lhs[step * a_skip..];"
i = s.index(old_start)
j = s.index(old_loop_start, i)
end = s.index("        Ok(dst)\n    }\n", j)
head = s[i:j].replace("        let mut dst = vec![T::zero(); b * m * n];\n", "")
new_loop = '''        let len = b * m * n;
        if k == 0 {
            return Ok(vec![T::zero(); len]);
        }
        // bertpipe: no zeroing pass (gemm overwrites dst: read_dst is false).
        let mut dst: Vec<T> = Vec::with_capacity(len);
        let dst_ptr = SendPtr(dst.as_mut_ptr());
        let product = |step: usize, parallelism: Parallelism| unsafe {
            gemm(
                /* m: usize = */ m,
                /* n: usize = */ n,
                /* k: usize = */ k,
                /* dst: *mut T = */ dst_ptr.get().add(step * c_skip),
                /* dst_cs: isize = */ dst_cs as isize,
                /* dst_rs: isize = */ dst_rs as isize,
                /* read_dst: bool = */ false,
                /* lhs: *const T = */ lhs[step * a_skip..].as_ptr(),
                /* lhs_cs: isize = */ lhs_cs as isize,
                /* lhs_rs: isize = */ lhs_rs as isize,
                /* rhs: *const T = */ rhs[step * b_skip..].as_ptr(),
                /* rhs_cs: isize = */ rhs_cs as isize,
                /* rhs_rs: isize = */ rhs_rs as isize,
                /* alpha: T = */ T::zero(),
                /* beta: T = */ T::one(),
                /* conj_dst: bool = */ false,
                /* conj_lhs: bool = */ false,
                /* conj_rhs: bool = */ false,
                parallelism,
            )
        };
        // bertpipe: a batch of at least one product per thread runs a sequential gemm per task.
        if num_threads > 1 && b >= num_threads {
            (0..b).into_par_iter().for_each(|step| product(step, Parallelism::None));
        } else {
            for step in 0..b {
                product(step, parallelism);
            }
        }
        // SAFETY: the products above wrote all b * m * n elements.
        unsafe { dst.set_len(len) };
'''
s = s[:i] + head + new_loop + s[end:]
s = s.replace("impl Map2 for MatMul {", '''/// A destination pointer shared by the tasks of a batched matmul, each writing its own product.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

impl Map2 for MatMul {''', 1)
open(p, "w").write(s)
print(f"{p}: matmul patched")
