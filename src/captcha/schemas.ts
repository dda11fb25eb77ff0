import Type from 'typebox'

/**
 * The bot check's token (docs/SECURITY.md, "Bot protection"), on the routes that create an account
 * or send mail to an address the caller names. Required when CAPTCHA_PROVIDER is set (a missing or
 * refused one is VALIDATION_ERROR on `captcha`); accepted and ignored otherwise, so a client can
 * always send it. Turnstile's tokens are at most 2048 characters, hCaptcha's a few thousand.
 */
export const CaptchaToken = Type.Optional(Type.String({ maxLength: 8192, description: 'The bot check widget\'s token: required when the service has CAPTCHA_PROVIDER set, ignored otherwise' }))
