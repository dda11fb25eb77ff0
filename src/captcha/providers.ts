/**
 * What differs between the two supported bot-protection providers (docs/SECURITY.md, "Bot
 * protection"): where the server verifies a token, where the browser loads the widget from, the
 * form field the widget fills in, and what a Content-Security-Policy must allow for the widget.
 * Both speak the same siteverify protocol (a form POST of `secret`, `response`, `remoteip`,
 * answered with JSON `{success, "error-codes"}`), so the verifier is one.
 */
export const CAPTCHA_PROVIDERS = ['turnstile', 'hcaptcha'] as const
export type CaptchaProvider = (typeof CAPTCHA_PROVIDERS)[number]

export interface ProviderFacts {
  /** The provider's siteverify endpoint (CAPTCHA_VERIFY_URL overrides it). */
  siteverify: string
  /** The widget's script: it renders every element with `widgetClass` and `data-sitekey`. */
  script: string
  widgetClass: string
  /** The hidden field the widget adds to the form it sits in, holding the token. */
  formField: string
  /** The policy the widget needs, by directive, as the provider documents it. */
  csp: { script: string[]; frame: string[]; style: string[]; connect: string[] }
}

export const PROVIDERS: Record<CaptchaProvider, ProviderFacts> = {
  turnstile: {
    siteverify: 'https://challenges.cloudflare.com/turnstile/v0/siteverify',
    script: 'https://challenges.cloudflare.com/turnstile/v0/api.js',
    widgetClass: 'cf-turnstile',
    formField: 'cf-turnstile-response',
    csp: { script: ['https://challenges.cloudflare.com'], frame: ['https://challenges.cloudflare.com'], style: [], connect: [] },
  },
  hcaptcha: {
    siteverify: 'https://api.hcaptcha.com/siteverify',
    script: 'https://js.hcaptcha.com/1/api.js',
    widgetClass: 'h-captcha',
    formField: 'h-captcha-response',
    // hCaptcha asks for the whole domain: its asset hosts vary by region and over time.
    csp: {
      script: ['https://hcaptcha.com', 'https://*.hcaptcha.com'],
      frame: ['https://hcaptcha.com', 'https://*.hcaptcha.com'],
      style: ['https://hcaptcha.com', 'https://*.hcaptcha.com'],
      connect: ['https://hcaptcha.com', 'https://*.hcaptcha.com'],
    },
  },
}
