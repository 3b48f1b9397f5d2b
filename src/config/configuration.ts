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
import { fail, ok, type Result } from "../core/result.ts";
import { show } from "../core/show.ts";
import { hiddenAdminPath, parseAdminPrefix } from "./admin-prefix.ts";
import { type Origin, type OriginSecret, parseOrigin, parseOriginSecret } from "./origin.ts";
import { readSettings, type Settings, type SettingsInput } from "./settings.ts";

/** Every variable the configuration is read from (see `Env`); every one is optional. */
export type ConfigInput = SettingsInput & {
  ORIGIN_URL?: unknown;
  ORIGIN_SECRET?: unknown;
  ORIGIN_SECRET_HEADER?: unknown;
  ADMIN_PREFIX?: unknown;
};

/** Where allowed requests go (null: the request's own URL), and the secret they carry (null: none). */
export type Forwarding = { origin: Origin; secret: OriginSecret | null };

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
  /**
   * Where and how allowed requests are forwarded: `ORIGIN_URL`, and the
   * secret in its header when `ORIGIN_SECRET` is set. A failure while
   * either is invalid, with their errors: the origin is then not known, or
   * not reached as the operator meant, so nothing is forwarded. An invalid
   * header with no secret set fails only `originSecret`: nothing goes in it.
   */
  forwarding: Result<Forwarding>;
  /** `ADMIN_PREFIX`, checked whether or not the admin API is on. */
  adminPrefix: Result<string>;
  /** Every error, each naming its variable (and rule and field): the settings' first, then the origin's, then the prefix's. */
  errors: string[];
};

/** Reads every variable of the configuration; an error in one never hides another's. */
export function readConfiguration(input: ConfigInput): Configuration {
  const read = readSettings(input);
  const { settings } = read;
  const errors = [...read.errors];
  const origin = parseOrigin(input.ORIGIN_URL as string | undefined);
  const originSecret = parseOriginSecret(input.ORIGIN_SECRET, input.ORIGIN_SECRET_HEADER, settings.keyHeaders);
  const adminPrefix = parseAdminPrefix(input.ADMIN_PREFIX);
  // The client-limits endpoint is answered before the admin API: at one of its paths it would hide it, so it is off.
  const hidden =
    settings.clientLimitsPath !== null && adminPrefix.ok
      ? hiddenAdminPath(settings.clientLimitsPath, adminPrefix.value)
      : null;
  if (hidden !== null && adminPrefix.ok) {
    errors.push(
      `CLIENT_LIMITS_PATH: ${show(input.CLIENT_LIMITS_PATH)} is a path of the admin API (${hidden}, the dashboard or a route), which it would hide, since it is answered first; the endpoint is off. Choose a path of its own, such as "/rate_limit" or "${adminPrefix.value}/me"`,
    );
  }
  const secretSet = input.ORIGIN_SECRET !== undefined && input.ORIGIN_SECRET !== "";
  const forwarding: Result<Forwarding> =
    origin.ok && (originSecret.ok || !secretSet)
      ? ok({ origin: origin.value, secret: originSecret.ok ? originSecret.value : null })
      : fail(...errorsOf(origin), ...(secretSet ? errorsOf(originSecret) : []));
  return {
    settings: hidden === null ? settings : { ...settings, clientLimitsPath: null },
    origin,
    originSecret,
    forwarding,
    adminPrefix,
    errors: [...errors, ...[origin, originSecret, adminPrefix].flatMap(errorsOf)],
  };
}

const errorsOf = (result: Result<unknown>): string[] => (result.ok ? [] : result.errors);
