/**
 * @module
 * The Worker's whole configuration, read from its variables once: the
 * settings it decides with, where and how it forwards, the admin API's
 * prefix, and every error in them, in one list. The Worker logs that list
 * and its admin API answers with it; `npm run check-config` reports it as
 * its errors; so the three always agree.
 *
 * src/config/ is the Worker's variables, validated; pure, so the offline
 * checker (tools/check-config.ts) runs the same code.
 */
import type { Result } from "../core/result.ts";
import { parseAdminPrefix } from "./admin-prefix.ts";
import { type Origin, type OriginSecret, parseOrigin, parseOriginSecret } from "./origin.ts";
import { readSettings, type Settings, type SettingsInput } from "./settings.ts";

/** Every variable the configuration is read from (see `Env`); every one is optional. */
export type ConfigInput = SettingsInput & {
  ORIGIN_URL?: unknown;
  ORIGIN_SECRET?: unknown;
  ORIGIN_SECRET_HEADER?: unknown;
  ADMIN_PREFIX?: unknown;
};

export type Configuration = {
  /**
   * The settings as far as they are valid: what is invalid is left out (a
   * rule, a tier's limit) or at its default (a variable); see readSettings.
   */
  settings: Settings;
  /** `ORIGIN_URL`: where allowed requests go. */
  origin: Result<Origin>;
  /** `ORIGIN_SECRET` in `ORIGIN_SECRET_HEADER`, checked against the headers the valid rules count clients by. */
  originSecret: Result<OriginSecret | null>;
  /** `ADMIN_PREFIX`, checked whether or not the admin API is on. */
  adminPrefix: Result<string>;
  /** Every error, each naming its variable (and rule and field): the settings' first, then the origin's, then the prefix's. */
  errors: string[];
};

/** Reads every variable of the configuration; an error in one never hides another's. */
export function readConfiguration(input: ConfigInput): Configuration {
  const { settings, errors } = readSettings(input);
  const origin = parseOrigin(input.ORIGIN_URL as string | undefined);
  const originSecret = parseOriginSecret(input.ORIGIN_SECRET, input.ORIGIN_SECRET_HEADER, settings.keyHeaders);
  const adminPrefix = parseAdminPrefix(input.ADMIN_PREFIX);
  return {
    settings,
    origin,
    originSecret,
    adminPrefix,
    errors: [...errors, ...[origin, originSecret, adminPrefix].flatMap((r) => (r.ok ? [] : r.errors))],
  };
}
