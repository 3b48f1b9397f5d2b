/**
 * @module
 * Values quoted in messages as a config file would spell them.
 */

/** A value as it would appear in a config file, for error messages: JSON (a number JSON cannot hold as itself), cut to 80 characters. */
export const show = (value: unknown): string => {
  // JSON writes these as null; a config read as JSON gets Infinity from 1e400, which is what it wrote.
  if (typeof value === "number" && !Number.isFinite(value)) return String(value);
  const text = JSON.stringify(value);
  if (text === undefined) return String(value);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
};
