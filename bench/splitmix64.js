// src/base/splitmix64.h in BigInt, for the JavaScript tools and tests that recompute
// latte's seeded draws: splitmix(state) returns a function giving the next 64-bit value.
'use strict';
const MASK = (1n << 64n) - 1n;

function splitmix(state) {
  let s = BigInt(state) & MASK;
  return () => {
    s = (s + 0x9e3779b97f4a7c15n) & MASK;
    let z = s;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
    return z ^ (z >> 31n);
  };
}

module.exports = { splitmix };
