/** Types of serve-node-flags.mjs for the tests and benchmarks that import it. */
export declare function serveNodeFlags(packageJsonPath?: URL | string): string[];
