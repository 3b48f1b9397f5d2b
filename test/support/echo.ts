/** What the test origin reports about a request it received. */
export type Echo = {
  method: string;
  /** The request target exactly as it arrived on the wire. */
  url: string;
  /** Header pairs as received, names lower-cased. */
  headers: [string, string][];
  bodyBytes: number;
  bodySha256: string;
};
