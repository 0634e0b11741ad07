"""Rewrites candle-core's backprop.rs so a node's first gradient is stored as is instead of
zeros + add (`let s = grads.or_insert(x)?; *s = s.add(&g)?;` → `grads.accumulate(x, &g)?;`)."""
import re, sys
p = sys.argv[1]
s = open(p).read()
pat = re.compile(r'let (\w+) = grads\.or_insert\(([^;]+?)\)\?;\s*\n(\s*)\*\1 = \1\.add\(&(.+?)\)\?;?\n')
count = 0
def rep(m):
    global count
    name, arg, ind, expr = m.groups()
    if name in expr:
        return m.group(0)
    count += 1
    return f'grads.accumulate({arg}, &{expr})?;\n'
s = pat.sub(rep, s)
s = s.replace('''    fn or_insert(&mut self, tensor: &Tensor) -> Result<&mut Tensor> {''', '''    /// Adds `grad` to `tensor`'s gradient; the first one is stored as is (no zeros + add).
    fn accumulate(&mut self, tensor: &Tensor, grad: &Tensor) -> Result<()> {
        match self.0.entry(tensor.id()) {
            Entry::Occupied(mut entry) => {
                let sum = entry.get().add(grad)?;
                entry.insert(sum);
            }
            Entry::Vacant(entry) => {
                entry.insert(grad.contiguous()?);
            }
        }
        Ok(())
    }

    fn or_insert(&mut self, tensor: &Tensor) -> Result<&mut Tensor> {''')
open(p, 'w').write(s)
print(f"{p}: {count} accumulations rewritten")
