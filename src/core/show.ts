/**
 * @module
 * Values quoted in messages as a config file would spell them.
 */

/** A value as it would appear in a config file, for error messages: JSON, cut to 80 characters. */
export const show = (value: unknown): string => {
  const text = JSON.stringify(value);
  if (text === undefined) return String(value);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
};
