/** Types of build-if-stale.mjs for the tests that import it. */
export declare const INPUTS: string[];
export declare const OUTPUTS: string[];
export declare function staleness(root: string): { stale: boolean; reason: string };
