/**
 * Calls between grains, counted locally in bounded memory and handed out in report-sized batches.
 *
 * At most `maxPairs` distinct pairs are kept; calls between pairs beyond that are counted as
 * dropped: the oracle's repartitioner only needs the heavy pairs, and a pair seen early keeps
 * counting. A pair and its reverse are one edge, as the oracle counts them; a grain calling itself
 * is no edge at all.
 */
/** Edges per report: the oracle's limit on one `POST …/edges`. */
export declare const MAX_EDGES_PER_REPORT = 10000;
/** Bytes of JSON per report, well inside the oracle's request body limit (1 MiB by default). */
export declare const MAX_REPORT_BYTES: number;
/** The largest count of one edge the oracle takes. */
export declare const MAX_COUNT = 1000000000;
export interface Edge {
    from: string;
    to: string;
    count: number;
}
export declare class EdgeCounter {
    readonly maxPairs: number;
    /** Calls not counted because `maxPairs` pairs were kept already. */
    dropped: number;
    private counts;
    constructor(maxPairs?: number);
    record(from: string, to: string, calls?: number): void;
    /** Distinct pairs kept now. */
    get size(): number;
    /** Everything counted so far, emptied, in batches of at most `MAX_EDGES_PER_REPORT`. */
    takeBatches(): Edge[][];
    /** Takes back a batch that could not be reported: counted again, within the bound. */
    putBack(batch: readonly Edge[]): void;
}
