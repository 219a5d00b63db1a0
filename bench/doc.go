// Package bench compares tokenfair/ratelimit with other Go rate limiters,
// side by side in one run. It is a module of its own so that the peers never
// enter the product's module graph. See BENCHMARKS.md at the repository's
// root for results and the command that produced them.
package bench
