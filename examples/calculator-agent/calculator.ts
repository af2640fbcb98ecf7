/**
 * The calculator tool the agent executes: + - * / and parentheses over decimal numbers, parsed
 * by recursive descent (never eval: the arguments come from a model).
 */
export function evaluate(expression: string): number {
  let at = 0;
  const src = expression.replace(/\s+/g, '');
  const peek = () => src[at];
  const number = (): number => {
    const m = /^\d+(\.\d+)?/.exec(src.slice(at));
    if (!m) throw new Error(`expected a number at ${at} in ${JSON.stringify(expression)}`);
    at += m[0].length;
    return Number(m[0]);
  };
  const factor = (): number => {
    if (peek() === '-') {
      at++;
      return -factor();
    }
    if (peek() === '(') {
      at++;
      const v = sum();
      if (peek() !== ')') throw new Error(`expected ) at ${at}`);
      at++;
      return v;
    }
    return number();
  };
  const product = (): number => {
    let v = factor();
    while (peek() === '*' || peek() === '/') v = src[at++] === '*' ? v * factor() : v / factor();
    return v;
  };
  const sum = (): number => {
    let v = product();
    while (peek() === '+' || peek() === '-') v = src[at++] === '+' ? v + product() : v - product();
    return v;
  };
  const v = sum();
  if (at !== src.length) throw new Error(`unexpected ${JSON.stringify(src[at])} at ${at}`);
  return v;
}
