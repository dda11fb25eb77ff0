import { html, type Html } from '../html.ts'
import type { MailMessage } from './index.ts'

/** What every mail of one deployment shares: the product's name (APP_NAME). */
export interface MailBrand {
  appName: string
}

interface ActionMail {
  to: string
  subject: string
  intro: string
  action: string
  /** The sentence before the link, ending in a colon in the text part. */
  lead: string
  link: string
  codeLabel: string
  token: string
  outro: string
}

/**
 * One shape for every mail that carries a link: a plain-text part as before (the link and the
 * bare code each on a line of their own) and an HTML part with the same link as a button. The
 * HTML uses inline styles only and no images, and the link is also written out in full, so it
 * reads the same in a client that blocks images or ignores styles.
 */
function actionMail(brand: MailBrand, mail: ActionMail): MailMessage {
  // The subject is the one part of a mail that shows where the body does not: in a lock-screen
  // preview, a mail client's list, a relay's log. So it never carries the link or the code
  // (docs/SECURITY.md, the third review); a template that tried is a bug, caught on its first use.
  if (mail.subject.includes(mail.token) || mail.subject.includes(mail.link)) throw new Error('a mail subject must not carry its link or code')
  const text = [mail.intro, '', `${mail.lead}:`, mail.link, '', `${mail.codeLabel}:`, mail.token, '', mail.outro].join('\n')
  return { to: mail.to, subject: mail.subject, text, html: htmlDocument(brand, mail).value }
}

function htmlDocument(brand: MailBrand, mail: ActionMail): Html {
  return htmlShell(brand, mail.subject, html`<p style="margin: 0 0 16px; font-size: 16px; line-height: 1.5;">${mail.intro}</p>
<p style="margin: 0 0 24px; font-size: 16px; line-height: 1.5;">${mail.lead}.</p>
<p style="margin: 0 0 24px;"><a href="${mail.link}" style="display: inline-block; padding: 12px 24px; background: #1d4ed8; color: #ffffff; text-decoration: none; border-radius: 6px; font-size: 16px; font-weight: bold;">${mail.action}</a></p>
<p style="margin: 0 0 8px; font-size: 14px; line-height: 1.5;">If the button does not work, copy this address into your browser:</p>
<p style="margin: 0 0 24px; font-size: 14px; line-height: 1.5; word-break: break-all;"><a href="${mail.link}" style="color: #1d4ed8;">${mail.link}</a></p>
<p style="margin: 0 0 8px; font-size: 14px; line-height: 1.5;">${mail.codeLabel}:</p>
<p style="margin: 0 0 24px; font-size: 14px; font-family: monospace; word-break: break-all;">${mail.token}</p>
<p style="margin: 0; font-size: 14px; line-height: 1.5; color: #4b5563;">${mail.outro}</p>`)
}

/** The frame every HTML mail shares: the product's name over the content, inline styles only. */
function htmlShell(brand: MailBrand, subject: string, content: Html): Html {
  const font = 'font-family: -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif'
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${subject}</title>
</head>
<body style="margin: 0; padding: 24px; background: #f4f5f7; color: #1c1f24; ${font}">
<table role="presentation" width="100%" cellpadding="0" cellspacing="0" style="max-width: 560px; margin: 0 auto; background: #ffffff; border-radius: 8px;">
<tr><td style="padding: 32px;">
<p style="margin: 0 0 16px; font-size: 20px; font-weight: bold;">${brand.appName}</p>
${content}
</td></tr>
</table>
</body>
</html>
`
}

export function verificationMail(brand: MailBrand, to: string, link: string, token: string): MailMessage {
  return actionMail(brand, {
    to,
    subject: 'Verify your e-mail address',
    intro: `Welcome to ${brand.appName}.`,
    action: 'Verify my address',
    lead: 'Open this link to verify your e-mail address (it works once, for 24 hours)',
    link,
    codeLabel: 'Or give this verification code to the application',
    token,
    outro: 'If you did not create an account, ignore this message.',
  })
}

export function passwordResetMail(brand: MailBrand, to: string, link: string, token: string): MailMessage {
  return actionMail(brand, {
    to,
    subject: 'Reset your password',
    intro: `Someone asked to reset the password of your ${brand.appName} account.`,
    action: 'Choose a new password',
    lead: 'Open this link to choose a new password (it works once, for 1 hour)',
    link,
    codeLabel: 'Or give this reset code to the application',
    token,
    outro: 'If it was not you, ignore this message: your password stays as it is.',
  })
}

/**
 * A notice of a change to how the account signs in (a second factor added or removed, a recovery
 * code used, an operator's reset): no link and no code, so there is nothing in it to phish with,
 * and it tells the person what to do if it was not them.
 */
export function securityNoticeMail(brand: MailBrand, to: string, notice: { subject: string; what: string }): MailMessage {
  const outro = `If this was not you, reset your password at once and contact the ${brand.appName} team.`
  const text = [`This is a security notice from ${brand.appName}.`, '', notice.what, '', outro].join('\n')
  const body = htmlShell(brand, notice.subject, html`<p style="margin: 0 0 16px; font-size: 16px; line-height: 1.5;">${notice.what}</p>
<p style="margin: 0; font-size: 14px; line-height: 1.5; color: #4b5563;">${outro}</p>`)
  return { to, subject: notice.subject, text, html: body.value }
}

/**
 * A provider identity was linked to the account, by the user or automatically by a verified
 * address (docs/SECURITY.md: no link is silent): it names the provider, since that account can now sign in.
 */
export function identityLinkedMail(brand: MailBrand, to: string, provider: string): MailMessage {
  return securityNoticeMail(brand, to, {
    subject: 'A sign-in method was added to your account',
    what: `Sign-in with ${provider} was linked to your ${brand.appName} account: that ${provider} account can now sign in to yours.`,
  })
}

/** The e-mailed sign-in (docs/email-sign-in.md): a link, and the 6-digit code to type instead (on another device, say). */
export function signInCodeMail(brand: MailBrand, to: string, link: string, code: string): MailMessage {
  return actionMail(brand, {
    to,
    // Not the code: a subject is shown in lock-screen previews and kept where the body is not.
    subject: `Your ${brand.appName} sign-in code`,
    intro: `Someone asked to sign in to ${brand.appName} with this address.`,
    action: 'Sign in',
    lead: 'Open this link to sign in (it works once, for 10 minutes)',
    link,
    codeLabel: 'Or type this code where you asked to sign in',
    token: code,
    outro: 'If it was not you, ignore this message: nobody can sign in without it.',
  })
}

/** A change of address (docs/profile.md): the link goes to the new address, which it proves. */
export function emailChangeMail(brand: MailBrand, to: string, link: string, token: string): MailMessage {
  return actionMail(brand, {
    to,
    subject: 'Confirm your new e-mail address',
    intro: `Someone asked to use this address for their ${brand.appName} account.`,
    action: 'Use this address',
    lead: 'Open this link to confirm the change (it works once, for 24 hours)',
    link,
    codeLabel: 'The confirmation code in the link',
    token,
    outro: 'If it was not you, ignore this message: nothing changes without the link.',
  })
}

/**
 * The notice to the old address when a change of address is asked for: unlike the other notices it
 * carries a link, the one that cancels the change, since the owner reading it may not be the one who
 * asked (a password that leaked, a session left open). The link only ever undoes; it grants nothing.
 */
export function emailChangeNoticeMail(brand: MailBrand, to: string, newEmail: string, cancelLink: string, token: string): MailMessage {
  return actionMail(brand, {
    to,
    subject: 'A change of your e-mail address was asked for',
    intro: `Someone signed in to your ${brand.appName} account asked to change its address to ${newEmail}. Nothing changes unless the link sent to that address is used within 24 hours.`,
    action: 'Cancel the change',
    lead: 'If it was not you, open this link to cancel the change and sign out the session that asked for it',
    link: cancelLink,
    codeLabel: 'The cancellation code in the link',
    token,
    outro: 'If it was not you, also reset your password and sign out of every device.',
  })
}

/**
 * An invitation to an organisation (docs/authorization.md): it names the organisation and the
 * member who invited, in the body only; the subject stays fixed, so neither the link nor a name a
 * member typed reaches lock-screen previews and relay logs.
 */
export function invitationMail(brand: MailBrand, to: string, link: string, token: string, invitation: { organization: string; inviter: string }): MailMessage {
  return actionMail(brand, {
    to,
    subject: `An invitation to an organisation on ${brand.appName}`,
    intro: `${invitation.inviter} invited this address to join the organisation "${invitation.organization}" on ${brand.appName}.`,
    action: 'See the invitation',
    lead: 'Open this link to accept it (it works once, for 7 days, for the account with this address; create or confirm that account first if you have not)',
    link,
    codeLabel: 'The invitation code in the link',
    token,
    outro: 'If you do not know them, ignore this message: nothing happens without the link.',
  })
}
